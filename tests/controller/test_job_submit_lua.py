"""The real job_submit.lua, run in Lua 5.1 (what slurmctld 22.05 embeds) with a stub ``slurm`` table:
its worst case of a submission, and of the account's pending jobs, equals ``policy.tokens`` for the same
request, to the token, far past 2^53 (balances, prices and rates large enough that doubles would round)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from conftest import IN_CI

from slurm_yolo.core import config
from slurm_yolo.core.billing import policy
from slurm_yolo.core.config import Partition
from slurm_yolo.state import availability, db

LUA = shutil.which("lua5.1")
NO_VAL, INFINITE = 4294967294, 4294967295
CASES = 300

DRIVER = """
slurm = {SUCCESS = 0, ERROR = -1, ESLURM_ACCOUNTING_POLICY = 2050, log_user = function() end}
dofile(arg[1])
for i, case in ipairs(dofile(arg[2])) do
  for _, account in ipairs({case.account .. "z", case.account .. "ok", case.account .. "no"}) do
    slurm.jobs = {}
    for _, job in ipairs(case.jobs) do  -- keyed as slurmctld keys them: the job id, as a string
      job.account = account
      slurm.jobs[job.stale_key or tostring(job.job_id)] = job
    end
    local desc = {}
    for k, v in pairs(case.desc) do desc[k] = v end
    desc.account = account
    print(account .. " " .. slurm_job_submit(desc, case.parts, 1000))
  end
end
"""


def lua(value: Any) -> str:
    """A Python value as a Lua literal (ints, strings, lists, dicts of them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "{" + ", ".join(lua(v) for v in value) + "}"
    return "{" + ", ".join(f"[{lua(k)}] = {lua(v)}" for k, v in value.items()) + "}"


def seconds_of(limit: int, part: dict[str, int] | None, unlimited: int) -> int:
    """The hold's seconds as slurmctld will give the job its limit (the partition's default, else its max)."""
    if limit in (NO_VAL, INFINITE) and part is not None:
        limit = part["default_time"] if part["default_time"] not in (NO_VAL, INFINITE) else part["max_time"]
    return policy.hold_seconds(None if limit in (NO_VAL, INFINITE) else limit * 60, unlimited)


def gres(rng: random.Random, name: str, count: int) -> str:
    return rng.choice(
        [f"gres:{name}:{count}", f"gres/{name}:{count}", f"gres:{name}:t4:{count}", f"gres/{name}={count}"]
    )


def request(
    rng: random.Random, i: int, parts: dict[str, Partition], tiers: dict[str, int], big: bool
) -> dict[str, Any]:
    """One random submission (and one pending job of its account), with what the policy says of them."""
    names = rng.sample(sorted(parts), rng.choice([1, 1, 2]))
    kind = rng.choice(["gpu", "shard"])
    count = rng.choice([1, 2, 3, 8, 10**9 - 1] if big else [1, 2, 3, 4, 8])
    nodes = rng.choice([1, 1, 2, 64, 99999] if big else [1, 1, 2])
    limit = rng.choice([NO_VAL, 1, 5, 60, 1440, 527040] if big else [NO_VAL, 1, 5, 60, 1440])
    qos = rng.choice([*tiers, "unknown"])
    exclusive = rng.random() < 0.15
    tasks, array = rng.choice(
        [(1, ""), (10, "0-9"), (3, "1,3,5"), (50, "0-99:2%4"), (10, "[0-9]"), (1000000, "0-999999")]
    )
    part_list = {
        n: {"default_time": rng.choice([NO_VAL, 30]), "max_time": rng.choice([INFINITE, 2880]), "flag_default": 0}
        for n in parts
    }
    desc = {
        "time_limit": limit,
        "partition": ",".join(names),
        "qos": qos,
        "min_nodes": nodes,
        "max_nodes": nodes,
        "tres_per_node": gres(rng, kind, count),
        "array_inx": array,
        "shared": 0 if exclusive else NO_VAL,
    }
    rate = tiers.get(qos, policy.RATE_SCALE)
    worst = 0
    for n in names:
        share = policy.share(count * nodes if kind == "gpu" else 0, count * nodes, parts[n].shards_per_gpu)
        if exclusive:
            share = max(share, Fraction(nodes * parts[n].gpus_per_node))
        seconds = seconds_of(limit, part_list[n], UNLIMITED)
        worst = max(worst, policy.tokens(seconds, share, PRICES[n], rate))
    # a pending job of the account: what it asked for over all its nodes, its QOS (none: the dearest)
    p_kind, p_count, p_tasks = rng.choice(["gpu", "shard"]), rng.choice([1, 4, 10**9 - 1]), rng.choice([1, 7])
    p_names, p_limit = rng.sample(sorted(parts), 2), rng.choice([NO_VAL, 10, 527040])
    p_qos = rng.choice([*tiers, None])
    job = {
        "job_state": 0,
        "job_id": 10_000 + i,
        "tres_fmt_req_str": f"cpu=1,gres/{p_kind}={p_count}",
        "time_limit": p_limit,
        "partition": ",".join(p_names),
        "array_task_cnt": p_tasks,
    }
    if p_qos is not None:
        job["qos"] = p_qos
    p_rate = tiers.get(p_qos, policy.RATE_SCALE) if p_qos else max([policy.RATE_SCALE, *tiers.values()])
    pending = p_tasks * max(
        policy.tokens(
            seconds_of(p_limit, None, UNLIMITED),
            policy.share(p_count if p_kind == "gpu" else 0, p_count, parts[n].shards_per_gpu),
            PRICES[n],
            p_rate,
        )
        for n in p_names
    )
    # a record slurmctld freed after it built slurm.jobs (memory since reused): its id is not its key
    stale = {**job, "job_id": 20_000 + i, "stale_key": str(30_000 + i)}
    return {
        "account": f"c{i}",
        "desc": desc,
        "parts": part_list,
        "jobs": [job, stale],
        "need": worst * tasks,
        "pending": pending,
    }


UNLIMITED = policy.unlimited_cap(168)
PRICES: dict[str, int] = {}


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_lua_worst_cases_equal_the_policy(tmp_path: Path, home: Path) -> None:
    rng = random.Random(21)
    now = time.time()
    cfg = config.load()
    partitions = {
        f"p{n}": Partition(f"p{n}", gpus_per_node=gpn, shards_per_gpu=per)
        for n, (gpn, per) in enumerate([(1, 0), (4, 4), (8, 3), (2, 7), (8, 1000), (16, 0)])
    }
    cfg = replace(cfg, partitions=partitions, ledger=replace(cfg.ledger, unlimited_hold_hours=168.0))
    prices = []
    for n, name in enumerate(sorted(partitions)):
        current = rng.choice([1, 3, 1000, 999_983, 10**12 + 7, 10**15])
        PRICES[name] = current
        prices += [
            {"id": 5 * n, "cluster": "", "partition": name, "price": current * 2 + 1, "effective_at": now - 7200},
            {"id": 5 * n + 1, "cluster": "", "partition": name, "price": current, "effective_at": now - 60},
            {"id": 5 * n + 2, "cluster": "", "partition": name, "price": current * 5, "effective_at": now + 86400},
            {"id": 5 * n + 3, "cluster": "other", "partition": name, "price": 7, "effective_at": now - 60},
        ]
        if n % 2:  # the script's own cluster's price, in effect: it, not every cluster's, is held
            PRICES[name] = current + 11
            prices.append(
                {
                    "id": 5 * n + 4,
                    "cluster": "yolo",
                    "partition": name,
                    "price": current + 11,
                    "effective_at": now - 3600,
                }
            )
        elif n == 2:  # one only scheduled: every cluster's price holds until then
            prices.append(
                {"id": 5 * n + 4, "cluster": "yolo", "partition": name, "price": 3, "effective_at": now + 600}
            )
    tiers = {"prod": 800_000, "explore": 1_500_000, "third": 333_333, "tiny": 1, "dear": 1_000_000_007}
    tier_rows = [{"cluster": "", "qos": q, "rate_ppm": r} for q, r in tiers.items()]
    tier_rows += [
        {"cluster": "yolo", "qos": "prod", "rate_ppm": 700_001},
        {"cluster": "other", "qos": "explore", "rate_ppm": 5},
    ]
    tiers["prod"] = 700_001  # the script's cluster's own rate
    cases = [request(rng, i, partitions, tiers, big=i % 3 == 0) for i in range(CASES)]
    accounts = [
        {"name": f"{c['account']}{suffix}", "balance": balance, "capacity": 0, "rate_per_day": 0}
        for c in cases
        for suffix, balance in (("z", 0), ("ok", c["need"] + c["pending"]), ("no", c["need"] + c["pending"] - 1))
    ]
    text = availability.render(cfg, now, accounts, prices, tier_rows, [])
    availability.path(cfg).parent.mkdir(parents=True, exist_ok=True)
    availability.path(cfg).write_text(text)
    db.make_private(cfg.state_dir)  # where slurmctld appends refusals.log (the ledger's writers make it)
    script = tmp_path / "job_submit.lua"
    script.write_text(availability.script(cfg, "yolo"))
    (tmp_path / "cases.lua").write_text(
        "return " + lua([{k: v for k, v in c.items() if k not in ("need", "pending")} for c in cases])
    )
    (tmp_path / "driver.lua").write_text(DRIVER)
    assert LUA is not None, "CI installs lua5.1 (deploy/install)"
    out = subprocess.run(
        [LUA, str(tmp_path / "driver.lua"), str(script), str(tmp_path / "cases.lua")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    results = dict(line.split(" ") for line in out.splitlines())
    refused = {
        line.split(" ")[1]: line.split(" ")[3:5] for line in availability.refusals_path(cfg).read_text().splitlines()
    }
    wrong = []
    for c in cases:
        a = c["account"]
        want = [str(c["need"]), str(-c["pending"])]
        if refused.get(a + "z") != want or results[a + "ok"] != "0" or results[a + "no"] == "0":
            wrong.append(f"{a}: lua {refused.get(a + 'z')} {results[a + 'ok']} {results[a + 'no']}, policy {want}: {c}")
    assert not wrong, "\n".join(wrong[:5])
    assert max(c["need"] for c in cases) > 2**64 and any(0 < c["need"] < 2**53 for c in cases)


def run_on_p0(
    tmp_path: Path,
    cfg: config.Config,
    accounts: list[dict[str, Any]],
    price: int,
    cases: list[dict[str, Any]],
    driver: str,
) -> str:
    """The script of ``cfg`` (one partition, p0, at ``price``) run by ``driver`` on ``cases``, with
    ``accounts`` published: what the driver printed."""
    prices = [{"id": 1, "cluster": "", "partition": "p0", "price": price, "effective_at": time.time() - 60}]
    availability.path(cfg).parent.mkdir(parents=True, exist_ok=True)
    availability.path(cfg).write_text(availability.render(cfg, time.time(), accounts, prices, [], []))
    db.make_private(cfg.state_dir)
    script = tmp_path / "job_submit.lua"
    script.write_text(availability.script(cfg, "yolo"))
    (tmp_path / "cases.lua").write_text("return " + lua(cases))
    (tmp_path / "driver.lua").write_text(driver)
    assert LUA is not None, "CI installs lua5.1 (deploy/install)"
    return subprocess.run(
        [LUA, str(tmp_path / "driver.lua"), str(script), str(tmp_path / "cases.lua")],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


P0 = {"default_time": NO_VAL, "max_time": INFINITE, "flag_default": 0}  # a partition without limits


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_gpus_slurm_derives_from_ntasks_per_gpu_are_counted(tmp_path: Path, home: Path) -> None:
    """``--ntasks=6 --ntasks-per-gpu=4`` names no GPU count (Slurm gives the job 2 after the script):
    its worst case is 2 GPUs', not none (found by an attack: such a job went unchecked)."""
    cfg = config.load()
    cfg = replace(cfg, partitions={"p0": Partition("p0", gpus_per_node=8, shards_per_gpu=0)})
    price, need = 1000, 60 * 2 * 1000
    accounts = [
        {"name": n, "balance": b, "capacity": 0, "rate_per_day": 0}
        for n, b in (("tz", 0), ("tok", need), ("tno", need - 1))
    ]
    case = {
        "account": "t",
        "desc": {
            "time_limit": 1,
            "partition": "p0",
            "num_tasks": 6,
            "ntasks_per_tres": 4,
            "min_nodes": 1,
            "max_nodes": 1,
        },
        "parts": {"p0": P0},
        "jobs": [],
    }
    out = run_on_p0(tmp_path, cfg, accounts, price, [case], DRIVER)
    assert dict(line.split(" ") for line in out.splitlines()) == {"tz": "2050", "tok": "0", "tno": "2050"}
    refused = [line.split(" ") for line in availability.refusals_path(cfg).read_text().splitlines()]
    assert [(r[1], r[3]) for r in refused] == [("tz", str(need)), ("tno", str(need))]


WAIT_DRIVER = """
slurm = {SUCCESS = 0, ERROR = -1, ESLURM_ACCOUNTING_POLICY = 2050, jobs = {}}
local told = ""
slurm.log_user = function(fmt, ...) told = string.format(fmt, ...) end
dofile(arg[1])
for _, case in ipairs(dofile(arg[2])) do
  told = ""
  local desc = {}
  for k, v in pairs(case.desc) do desc[k] = v end
  local rc = slurm_job_submit(desc, case.parts, 1000)
  print(desc.account .. "|" .. rc .. "|" .. (desc.begin_time and desc.begin_time - os.time() or -1) .. "|" .. told)
end
"""


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_a_job_the_refill_covers_soon_waits_for_it(tmp_path: Path, home: Path) -> None:
    """An account short of a job's worst case whose quota refills it within ledger.credit_wait_minutes:
    the job is accepted with a begin time when the refill covers it, and the user is told when; one
    beyond the wait, beyond the bucket's capacity or without a quota is refused as before. A --begin
    later than the refill stays the user's."""
    cfg = config.load()
    cfg = replace(
        cfg,
        partitions={"p0": Partition("p0", gpus_per_node=8, shards_per_gpu=0)},
        ledger=replace(cfg.ledger, credit_wait_minutes=60.0),
    )
    price = 1000
    need = 60 * price  # a minute of one GPU
    per_day = need * 144  # a job's worth every 600 s
    accounts = [
        {"name": "soon", "balance": need // 2, "capacity": 2 * need, "rate_per_day": per_day},  # half: 300 s
        {"name": "dry", "balance": -need, "capacity": 2 * need, "rate_per_day": per_day},  # overdrawn: 1200 s
        {"name": "later", "balance": need // 2, "capacity": 2 * need, "rate_per_day": per_day},  # its own --begin
        {"name": "full", "balance": 0, "capacity": need - 1, "rate_per_day": per_day},  # the bucket never holds it
        {"name": "slow", "balance": 0, "capacity": 2 * need, "rate_per_day": need * 12},  # 2 h
        {"name": "none", "balance": 0, "capacity": 0, "rate_per_day": 0},  # no quota
    ]
    far = int(time.time()) + 7200
    cases = [
        {
            "desc": {
                "account": a["name"],
                "time_limit": 1,
                "partition": "p0",
                "tres_per_node": "gres:gpu:1",
                "min_nodes": 1,
                "max_nodes": 1,
                **({"begin_time": far} if a["name"] == "later" else {}),
            },
            "parts": {"p0": P0},
        }
        for a in accounts
    ]
    out = run_on_p0(tmp_path, cfg, accounts, price, cases, WAIT_DRIVER)
    got = {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines()}
    waits = {a: int(begin) for a, (rc, begin, _) in got.items() if rc == "0"}
    assert sorted(waits) == ["dry", "later", "soon"], got
    expected = {"soon": 302, "dry": 1202, "later": far - int(time.time())}  # the refill's time, 2 s margin
    assert all(abs(waits[a] - expected[a]) <= 1 for a in waits), (waits, expected)  # a second may tick meanwhile
    assert got["soon"][2].startswith("slurm-yolo: account soon waits for credits: its refill covers this job by ")
    assert got["soon"][2].endswith(" (in 6 min); the job waits until then and starts by itself (squeue: BeginTime)")
    for name in ("full", "slow", "none"):
        assert got[name][0] == "2050" and f"account {name} cannot cover this job" in got[name][2], got[name]
    refused = [line.split(" ")[1] for line in availability.refusals_path(cfg).read_text().splitlines()]
    assert refused == ["full", "slow", "none"]


EXEMPT_DRIVER = """
slurm = {SUCCESS = 0, ERROR = -1, ESLURM_ACCOUNTING_POLICY = 2050, log_user = function() end}
dofile(arg[1])
for _, case in ipairs(dofile(arg[2])) do
  slurm.jobs = {}
  for _, job in ipairs(case.jobs) do slurm.jobs[tostring(job.job_id)] = job end
  local desc = {}
  for k, v in pairs(case.desc) do desc[k] = v end
  print(case.name .. " " .. slurm_job_submit(desc, case.parts, 1000))
end
"""


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_exempt_partitions_and_accounts_are_admitted_without_a_budget(tmp_path: Path, home: Path) -> None:
    """ledger.exempt_partitions and exempt_accounts, as the prolog applies them: a dry account's GPU
    job on an exempt partition, and an exempt account's anywhere, are admitted; a job that may also
    run on a partition that is not exempt needs that partition's worst case; a pending job on an
    exempt partition commits nothing of its account's balance."""
    cfg = config.load()
    cfg = replace(
        cfg,
        partitions={"p0": Partition("p0", gpus_per_node=8, shards_per_gpu=0)},
        ledger=replace(cfg.ledger, exempt_partitions=("free",), exempt_accounts=("Ops",)),
    )
    price, need = 1000, 60 * 1000  # a minute of one GPU on p0
    accounts = [
        {"name": n, "balance": b, "capacity": 0, "rate_per_day": 0}
        for n, b in (("dry", 0), ("ops", -(10**9)), ("exact", need), ("short", need - 1))
    ]
    parts = {"p0": P0, "free": P0}

    def case(name: str, account: str, partition: str, jobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        desc = {"account": account, "time_limit": 1, "partition": partition, "tres_per_node": "gres:gpu:1"}
        return {"name": name, "desc": {**desc, "min_nodes": 1, "max_nodes": 1}, "parts": parts, "jobs": jobs or []}

    pending = {  # 1000 GPUs for a day on the exempt partition: far past any balance here
        "job_state": 0,
        "job_id": 7,
        "account": "exact",
        "tres_fmt_req_str": "cpu=1,gres/gpu=1000",
        "time_limit": 1440,
        "partition": "free",
    }
    cases = [
        case("dry-free", "dry", "free"),
        case("dry-either", "dry", "free,p0"),
        case("ops-p0", "ops", "p0"),
        case("OPS-p0", "OPS", "p0"),
        case("exact-p0-free-pending", "exact", "p0", [pending]),
        case("short-p0", "short", "p0"),
    ]
    out = run_on_p0(tmp_path, cfg, accounts, price, cases, EXEMPT_DRIVER)
    assert dict(line.split(" ") for line in out.splitlines()) == {
        "dry-free": "0",
        "dry-either": "2050",
        "ops-p0": "0",
        "OPS-p0": "0",
        "exact-p0-free-pending": "0",
        "short-p0": "2050",
    }
    refused = [line.split(" ") for line in availability.refusals_path(cfg).read_text().splitlines()]
    assert [(r[1], r[3], r[4]) for r in refused] == [("dry", str(need), "0"), ("short", str(need), str(need - 1))]
    published = availability.path(cfg).read_text().splitlines()
    assert "exempt partition free" in published and "exempt account ops" in published


TRIAL_DRIVER = """
slurm = {SUCCESS = 0, ERROR = -1, ESLURM_ACCOUNTING_POLICY = 2050, ESLURM_ACCESS_DENIED = 2003, jobs = {}}
local told = ""
slurm.log_user = function(fmt, ...) told = string.format(fmt, ...) end
dofile(arg[1])
for _, case in ipairs(dofile(arg[2])) do
  told = ""
  local desc = {}
  for k, v in pairs(case.desc) do desc[k] = v end
  local rc
  if case.modify then
    rc = slurm_job_modify(desc, case.modify, case.parts, case.uid)
  else
    rc = slurm_job_submit(desc, case.parts, case.uid)
  end
  print(case.name .. "|" .. rc .. "|" .. tostring(desc.priority) .. "|" .. told)
end
"""


def trial_cases(mark: str) -> list[dict[str, Any]]:
    """Submissions of one minute of one GPU on p0, in turn, to one script (its ``recent`` kept between
    them): yolo-sbatch's trials (the mark in the comment) and real ones, by alice (1000) and bob (1001)."""

    def case(name: str, account: str, uid: int, comment: str | None) -> dict[str, Any]:
        desc = {"account": account, "time_limit": 1, "partition": "p0", "tres_per_node": "gres:gpu:1"}
        if comment is not None:
            desc["comment"] = comment
        return {"name": name, "desc": {**desc, "min_nodes": 1, "max_nodes": 1}, "parts": {"p0": P0}, "uid": uid}

    return [
        case("trial-1", "one", 1000, mark),  # -p auto: a trial per partition...
        case("trial-2", "one", 1000, mark),
        case("bob-trial", "one", 1001, mark),  # ...another user's, in the same second
        case("real", "one", 1000, "yolo:eff=12"),  # ...then the submission: the account covers one
        case("bob-real", "one", 1001, None),  # a second one it cannot (the first counted, as before)
        case("bob-trial-after", "one", 1001, mark),  # a trial of it is refused too, with the true figure
        case("short-trial", "short", 1000, mark),  # a trial the account truly cannot cover
        case("near-mark", "two", 1000, mark + " "),  # not the mark: counted as any real job
        case("near-mark-2", "two", 1000, mark.upper()),
    ]


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_trials_count_nowhere_and_a_marked_job_stays_held(tmp_path: Path, home: Path) -> None:
    """Issue 49: slurmctld runs job_submit.lua for ``sbatch --test-only`` too, and yolo-sbatch's
    ``-p auto`` asks one per partition before it submits: each admitted trial counted against the
    next, the submission and anyone's in the same two seconds, so an account that covers the job was
    refused. A trial (commands.will_run's mark) is checked as any submission, its true numbers when
    it does not fit, but counted nowhere and never noted in refusals.log. Every marked submission is
    held (priority 0), and its user can neither release it nor change its comment; root can."""
    from slurm_yolo.slurm import commands

    cfg = config.load()
    cfg = replace(cfg, partitions={"p0": Partition("p0", gpus_per_node=8, shards_per_gpu=0)})
    price, need = 1000, 60 * 1 * 1000  # a minute of one GPU on p0
    accounts = [
        {"name": n, "balance": b, "capacity": 0, "rate_per_day": 0}
        for n, b in (("one", need), ("short", need - 1), ("two", 2 * need - 1))
    ]
    marked = {"job_id": 5, "comment": commands.TRIAL_MARK, "time_limit": 1, "priority": 0}
    cases = trial_cases(commands.TRIAL_MARK) + [
        {"name": name, "desc": desc, "modify": rec, "parts": {"p0": P0}, "uid": uid}
        for name, desc, rec, uid in (
            ("release-marked", {"priority": INFINITE}, marked, 1000),
            ("uncomment-marked", {"comment": "x"}, marked, 1000),
            ("root-releases-marked", {"priority": INFINITE}, marked, 0),
            ("release-plain", {"priority": INFINITE}, {**marked, "comment": "yolo:eff=1"}, 1000),
        )
    ]
    out = run_on_p0(tmp_path, cfg, accounts, price, cases, TRIAL_DRIVER)
    got = {line.split("|")[0]: line.split("|")[1:] for line in out.splitlines()}
    rc = {name: v[0] for name, v in got.items()}
    assert rc == {
        "trial-1": "0",
        "trial-2": "0",
        "bob-trial": "0",
        "real": "0",
        "bob-real": "2050",
        "bob-trial-after": "2050",
        "short-trial": "2050",
        "near-mark": "0",
        "near-mark-2": "2050",  # the first near mark was counted: 2 x need - 1 left room for one
        "release-marked": "2003",
        "uncomment-marked": "2003",
        "root-releases-marked": "0",
        "release-plain": "0",
    }, got
    held = {name for name, v in got.items() if v[1] == "0"}
    assert held == {"trial-1", "trial-2", "bob-trial", "bob-trial-after", "short-trial"}, got
    assert f"its worst case is {need:,} tokens" in got["short-trial"][2]
    assert f"the account has {need - 1:,} left (balance {need - 1:,}, minus 0 for" in got["short-trial"][2]
    assert f"the account has 0 left (balance {need:,}, minus {need:,} for" in got["bob-trial-after"][2]
    assert "trial mark" in got["release-marked"][2] and "cancel it" in got["release-marked"][2]
    refused = [line.split(" ") for line in availability.refusals_path(cfg).read_text().splitlines()]
    # account, uid, need, left: the real refusals alone
    assert [r[1:] for r in refused] == [["one", "1001", str(need), "0"], ["two", "1000", str(need), str(need - 1)]]


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_a_shared_ledger_keeps_no_commitment_of_a_trial(tmp_path: Path, home: Path) -> None:
    """On a ledger several clusters share, the script asks the ledger (``admit``), which counts an
    admitted job as this cluster's commitment for the other clusters to see. A trial it admitted is
    asked again at once with nothing needed: this cluster's commitments are only its jobs again."""
    cfg = config.load()
    log = tmp_path / "client.log"
    client = tmp_path / "hook-client"
    client.write_text(f'#!/bin/sh\necho "$*" >> {log}\necho ok\n')
    client.chmod(0o755)
    cfg = replace(
        cfg,
        partitions={"p0": Partition("p0", gpus_per_node=8, shards_per_gpu=0)},
        ledger=replace(cfg.ledger, backend="mariadb"),
        hookd=replace(cfg.hookd, client=str(client)),
    )
    from slurm_yolo.slurm import commands

    price, need = 1000, 60 * 1000
    accounts = [{"name": "one", "balance": need, "capacity": 0, "rate_per_day": 0}]
    cases = trial_cases(commands.TRIAL_MARK)[:4]  # three trials, then the submission
    out = run_on_p0(tmp_path, cfg, accounts, price, cases, TRIAL_DRIVER)
    assert [line.split("|")[:2] for line in out.splitlines()] == [[c["name"], "0"] for c in cases]
    asked = log.read_text().splitlines()
    assert asked == [f"admit yolo one {need}", "admit yolo one 0"] * 3 + [f"admit yolo one {need}"], asked
