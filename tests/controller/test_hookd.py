"""hookd and its C client: the fast path of the slurmctld hooks, its fallback, and its safety.

The cluster's own hooks go through /opt/slurm-yolo/bin/slurm-yolo-hook and the hookd that
deploy/minicluster starts (every ledger test on the cluster exercises that path). These tests run a
private hookd on their own socket and state, to kill it, refuse users and replay hooks by hand.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO, poll

from slurm_yolo.controller.hookd import parse_request
from slurm_yolo.core import config as config_mod
from slurm_yolo.slurm import commands
from slurm_yolo.state import availability, ledger

VENV_BIN = Path("/opt/slurm-yolo/venv/bin")
CLIENT = Path("/opt/slurm-yolo/bin/slurm-yolo-hook")


def test_parse_request_reads_the_clients_format() -> None:
    event, env = parse_request(b"prolog\0SLURM_JOB_ID=12\0SLURM_JOB_COMMENT=a=b\0\0")
    assert event == "prolog" and env == {"SLURM_JOB_ID": "12", "SLURM_JOB_COMMENT": "a=b"}


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"rm -rf\0SLURM_JOB_ID=1", "unknown event"),
        (b"epilog\0SLURM_JOB_ID", "malformed environment entry"),
        (b"epilog\0=1", "malformed environment entry"),
        (b"epilog\0SLURM_JOB_ID=1;true", "no numeric SLURM_JOB_ID"),
        (b"prolog", "no numeric SLURM_JOB_ID"),
        (b"\xff\xfe", "unknown event"),
    ],
)
def test_parse_request_refuses_malformed_requests(data: bytes, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_request(data)


@pytest.fixture
def state() -> Iterator[Path]:
    """A state folder the SlurmUser (hookd) can write, with the cluster's config and no side jobs."""
    base = Path("/var/tmp/slurm-yolo-tests")
    base.mkdir(mode=0o755, exist_ok=True)
    home = base / f"hookd-{uuid.uuid4().hex[:8]}"
    home.mkdir(mode=0o755)
    text = (REPO / "deploy" / "config.toml").read_text()
    text = text.replace("[ledger]\n", "[ledger]\nenforce = false\nadmin_comment = false\nfeedback = false\n")
    (home / "config.toml").write_text(text + f'\n[hookd]\nsocket = "{home}/hookd.sock"\n')
    shutil.chown(home, "slurm", "slurm")
    yield home
    shutil.rmtree(home, ignore_errors=True)


def start_hookd(home: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [str(VENV_BIN / "slurm-yolo"), "hookd"],
        env={
            "SLURM_YOLO_CONFIG": str(home / "config.toml"),
            "SLURM_YOLO_HOME": str(home),
            "PATH": "/usr/bin:/bin",
            **(env or {}),
        },
        stderr=subprocess.PIPE,
    )
    poll("hookd socket", lambda: (home / "hookd.sock").is_socket() or proc.poll() is not None, timeout=30)
    assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    return proc


@pytest.fixture
def hookd(cluster: None, state: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = start_hookd(state)
    yield proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def hook_env(home: Path, job: int, restart: int = 0, socket: Path | None = None) -> dict[str, str]:
    return {
        "SLURM_JOB_ID": str(job),
        "SLURM_JOB_ACCOUNT": "vision",
        "SLURM_JOB_USER": "root",
        "SLURM_JOB_PARTITION": "a100",
        "SLURM_CLUSTER_NAME": "yolo",
        "SLURM_JOB_RESTART_COUNT": str(restart),
        "SLURM_YOLO_HOME": str(home),
        "SLURM_YOLO_HOOKD_SOCKET": str(socket or home / "hookd.sock"),
    }


def runs(home: Path) -> list[dict]:
    lg = ledger.reader(config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)}))
    if lg is None:
        return []
    try:
        return [dict(r) for r in lg.conn.execute("SELECT * FROM jobs ORDER BY job_id, restart")]
    finally:
        lg.close()


def check(home: Path) -> list[str]:
    lg = ledger.reader(config_mod.load(home / "config.toml", env={"SLURM_YOLO_HOME": str(home)}))
    assert lg is not None
    try:
        return lg.check()
    finally:
        lg.close()


def ended_jobs(n: int) -> list[int]:
    """Jobs that ran and ended, for replaying their hooks (the cluster's own hooks billed them in the
    cluster's ledger; the replays here write the test's)."""
    jobs = [
        commands.submit("#!/bin/bash\ntrue\n", ["-p", "a100", "--gres=shard:a100:1", "-t", "1", "-o", "/dev/null"])
        for _ in range(n)
    ]
    for job in jobs:
        commands.wait_for_end(job, poll=0.3, timeout=120)
    poll("sacct has every end", lambda: all(runs and runs[-1].final for runs in commands.job_runs(jobs).values()))
    return jobs


def held_jobs(n: int) -> list[int]:
    return [
        commands.submit(
            "#!/bin/bash\ntrue\n", ["-p", "a100", "--gres=gpu:a100:1", "--hold", "-t", "5", "-o", "/dev/null"]
        )
        for _ in range(n)
    ]


def test_client_names_a_missing_event_and_exits_zero() -> None:
    res = subprocess.run([str(CLIENT)], check=False, env={}, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and res.stderr.strip() == (
        "slurm-yolo-hook: cannot tell prolog from epilog (no SLURM_SCRIPT_CONTEXT, no argument)"
    )


def test_prolog_holds_and_epilog_settles_through_hookd(hookd: subprocess.Popen[bytes], state: Path) -> None:
    [job] = ended_jobs(1)
    env = hook_env(state, job)
    res = subprocess.run(
        [str(CLIENT)], env={**env, "SLURM_SCRIPT_CONTEXT": "prolog_slurmctld"}, timeout=60, check=False
    )
    assert res.returncode == 0
    [row] = runs(state)  # held before the client returned
    assert row["state"] == "held" and row["hold"] == 60 * 1_000_000 // 4 and row["gpus"] == 0.25
    res = subprocess.run([str(CLIENT), "epilog"], env=env, timeout=60, check=False)
    assert res.returncode == 0
    row = poll("settled", lambda: next((r for r in runs(state) if r["state"] == "settled"), None), timeout=60)
    assert row["end_state"] == "COMPLETED" and row["charge"] == row["elapsed"] * 1_000_000 // 4
    assert row["charge"] + row["refund"] == row["hold"]
    log = [json.loads(line) for line in (state / "private" / "hooks.log").read_text().splitlines()]
    assert [r["event"] for r in log] == ["prolog", "epilog"] and not any("alert" in r for r in log)
    assert check(state) == []


def test_without_hookd_the_client_runs_the_python_hooks(cluster: None, state: Path) -> None:
    [job] = ended_jobs(1)
    env = hook_env(state, job, socket=state / "nobody-listens.sock")
    for hook in ("prolog", "epilog"):
        assert subprocess.run([str(CLIENT), hook], env=env, timeout=60, check=False).returncode == 0
    [row] = runs(state)
    assert row["state"] == "settled" and row["end_state"] == "COMPLETED"


def children(pid: int) -> list[str]:
    """The children of process ``pid`` and their states (Z: <defunct>)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[1]) == pid:
            found.append(f"{stat.parent.name} {fields[0]}")
    return found


def test_hookd_leaves_no_children(cluster: None, state: Path) -> None:
    """A settlement's side work (here the feedback of each completed run) runs in hookd's worker
    thread, not in detached children: once it is done, hookd has no child at all (none <defunct>),
    with no reaper."""
    config = state / "config.toml"
    config.write_text(config.read_text().replace("feedback = false", "feedback = true"))
    server = start_hookd(state, {"PYTHONPATH": str(REPO)})  # this tree's hookd, and children, whatever is installed
    try:
        jobs = ended_jobs(3)
        for job in jobs:
            env = {
                **hook_env(state, job),
                "SLURM_JOB_UID": "0",  # a launcher's summary in its Comment
                "SLURM_JOB_COMMENT": "yolo:eff=1;run:at=1,ep=1,s=1,one=1,g=1,c=1",
            }
            for hook in ("prolog", "epilog"):
                assert subprocess.run([str(CLIENT), hook], env=env, timeout=60, check=False).returncode == 0

        def fed() -> bool:
            log = [json.loads(line) for line in (state / "private" / "hooks.log").read_text().splitlines()]
            return sorted(r["job"] for r in log if r["event"] == "feedback") == sorted(jobs)

        poll("the feedback of every run", fed, timeout=120)
        poll("hookd without children", lambda: not children(server.pid), timeout=60)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0


def test_hookd_refuses_other_users(hookd: subprocess.Popen[bytes], state: Path) -> None:
    """The socket is the SlurmUser's alone; opened to everyone, hookd still checks who connects."""
    (state / "hookd.sock").chmod(0o666)
    [job] = held_jobs(1)
    try:
        env = hook_env(state, job)
        send = (
            "import contextlib,socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);\n"
            "with contextlib.suppress(OSError): s.sendall(sys.argv[2].encode().replace(b',', b'\\0')); s.shutdown(1)\n"
            "print(s.recv(99).decode(), end='')"
        )  # hookd may answer and close before reading
        request = f"prolog,SLURM_JOB_ID={job},SLURM_YOLO_HOME={state}"
        res = subprocess.run(
            [
                "/usr/sbin/runuser",
                "-u",
                "alice",
                "--",
                "/usr/bin/python3",
                "-c",
                send,
                str(state / "hookd.sock"),
                request,
            ],
            capture_output=True,
            text=True,
            cwd="/tmp",
            timeout=60,
            check=False,
        )
        assert res.stdout == "error: permission denied\n", res.stderr
        # the client run by alice is refused too, falls back on the Python hook, which cannot write
        res = subprocess.run(
            ["/usr/sbin/runuser", "-u", "alice", "--", str(CLIENT), "prolog"],
            env=env,
            capture_output=True,
            text=True,
            cwd="/tmp",
            timeout=60,
            check=False,
        )
        assert res.returncode == 0 and "slurm-yolo-hook: hookd: error: permission denied" in res.stderr
        assert runs(state) == []
    finally:
        subprocess.run(["/usr/bin/scancel", str(job)], check=False)


def test_chaos_through_hookd_killed_and_restarted_keeps_the_books(hookd: subprocess.Popen[bytes], state: Path) -> None:
    """250 hook invocations (duplicated, shuffled, 24 at a time) through the client while hookd is
    killed -9 and restarted twice: clients fall back on the Python hooks meanwhile. The jobs never
    start, so every hold stays open until they are cancelled; then `ledger reconcile` settles each
    once from sacct, refunding it in full."""
    jobs = held_jobs(50)
    procs: list[subprocess.Popen[bytes]] = []
    server = hookd
    try:
        events = [(j, "prolog") for j in jobs for _ in range(3)] + [(j, "epilog") for j in jobs for _ in range(2)]
        random.Random(5).shuffle(events)
        for i, (job, hook) in enumerate(events):
            procs.append(subprocess.Popen([str(CLIENT), hook], env=hook_env(state, job)))
            if i in (60, 160):
                server.send_signal(signal.SIGKILL)
                server.wait(timeout=30)
                server = start_hookd(state)
            while sum(p.poll() is None for p in procs) >= 24:
                time.sleep(0.02)
        assert all(p.wait(timeout=120) == 0 for p in procs)
    finally:
        subprocess.run(["/usr/bin/scancel", *map(str, jobs)], check=False)
        if server is not hookd and server.poll() is None:
            server.send_signal(signal.SIGTERM)
            assert server.wait(timeout=60) == 0
    assert not (state / "hookd.sock").exists()  # a clean stop removes its socket
    for job in jobs:
        commands.wait_for_end(job, poll=0.3, timeout=60)
    env = {"SLURM_YOLO_CONFIG": str(state / "config.toml"), "SLURM_YOLO_HOME": str(state), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [str(VENV_BIN / "slurm-yolo"), "ledger", "reconcile", "--min-age", "0"],
        env=env,
        check=True,
        capture_output=True,
    )
    rows = [r for r in runs(state) if r["job_id"] in jobs]  # reconcile also bills the cluster's other runs here
    assert len(rows) == 50 and all(
        r["state"] == "settled" and r["charge"] == 0 and r["refund"] == r["hold"] for r in rows
    )
    assert check(state) == []


def test_kill_9_right_after_50_acknowledged_epilogs_loses_none(cluster: None, state: Path) -> None:
    """hookd answers an epilog once its event is committed to the inbox. Killed -9 right after
    acknowledging 50 (its sacct made slow, so none is settled yet), the next hookd settles every run
    exactly once, each charged its elapsed time (sacct's) x a quarter GPU x the default price."""
    jobs = ended_jobs(50)
    slow = state / "slow-bin"
    slow.mkdir()
    for command in ("squeue", "scontrol", "scancel", "sacctmgr", "sinfo"):
        (slow / command).symlink_to(f"/usr/bin/{command}")
    (slow / "sacct").write_text('#!/bin/sh\nsleep 20\nexec /usr/bin/sacct "$@"\n')
    (slow / "sacct").chmod(0o755)
    text = (state / "config.toml").read_text()
    (state / "slow.toml").write_text(text.replace("[slurm]\n", f'[slurm]\nbin_dir = "{slow}"\n'))
    server = start_hookd(state, {"SLURM_YOLO_CONFIG": str(state / "slow.toml")})
    try:
        acked = [
            subprocess.run(
                [str(CLIENT), "epilog"],
                env=hook_env(state, job),
                timeout=60,
                capture_output=True,
                text=True,
                check=False,
            )
            for job in jobs
        ]
        assert all(r.returncode == 0 and r.stderr == "" for r in acked)  # hookd's "ok", no fallback
    finally:
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=30)
    config = config_mod.load(state / "config.toml", env={"SLURM_YOLO_HOME": str(state)})
    with ledger.writer(config, publish=False) as lg:  # root reads the books the dead server left
        assert lg.inbox_open() == 50 and not lg.conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
    server = start_hookd(state)
    try:
        poll("every run settled", lambda: sum(r["state"] == "settled" for r in runs(state)) == 50, timeout=180)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
    res = subprocess.run(
        ["/usr/bin/sacct", "-X", "-n", "-P", "-j", ",".join(map(str, jobs)), "-o", "JobIDRaw,ElapsedRaw"],
        capture_output=True,
        text=True,
        check=True,
    )
    elapsed = {int(j): int(e) for j, e in (line.split("|") for line in res.stdout.split())}
    rows = runs(state)
    assert sorted(r["job_id"] for r in rows) == sorted(jobs)
    assert all(r["charge"] == elapsed[r["job_id"]] * 1_000_000 // 4 and r["hold"] == 60 * 1_000_000 // 4 for r in rows)
    with ledger.writer(config, publish=False) as lg:
        assert lg.inbox_open() == 0 and lg.check() == []
        charges = lg.conn.execute("SELECT job_key, count(*) FROM movements WHERE kind = 'charge' GROUP BY job_key")
        assert sorted(n for _, n in charges) == [1] * 50


def admit(state: Path, *args: str, user: str | None = None) -> subprocess.CompletedProcess[str]:
    """The hook client's admission question, as job_submit.lua asks it (or as ``user``)."""
    argv = [str(CLIENT), "admit", *args]
    if user:
        argv = ["/usr/sbin/runuser", "-u", user, "--", *argv]
    return subprocess.run(
        argv,
        env={"SLURM_YOLO_HOOKD_SOCKET": str(state / "hookd.sock")},
        capture_output=True,
        text=True,
        cwd="/tmp",
        timeout=60,
        check=False,
    )


def test_admission_on_a_shared_ledger_through_hookd(hookd: subprocess.Popen[bytes], state: Path) -> None:
    """job_submit.lua's question (``slurm-yolo-hook admit``): answered by the ledger in one turn, each
    cluster's commitments counted against the others'; malformed or foreign questions change nothing."""
    cfg = config_mod.load(state / "config.toml", env={"SLURM_YOLO_HOME": str(state)})
    with ledger.writer(cfg) as lg:
        lg.credit("vision", 1_000, "test")
    res = admit(state, "east", "vision", "600")
    assert (res.returncode, res.stdout) == (0, "ok\n")
    res = admit(state, "west", "vision", "401", "research=5")
    assert (res.returncode, res.stdout) == (1, "refused 1000 0 600\n")  # 600 + 401 > 1000
    res = admit(state, "west", "vision", "400", "research=5")
    assert (res.returncode, res.stdout) == (0, "ok\n")
    for bad in (
        ["east", "vision"],
        ["east", "vis ion", "1"],
        ["east", "vision", "-5"],
        ["east", "vision", "1e3"],
        ["east", "vision", "1", "x=1", "x=2"],
        ["east';rm -rf /;'", "vision", "1"],
        ["east", "vision", "1", "=1"],
        ["east", "vision", "9" * 40],
    ):
        res = admit(state, *bad)
        assert res.returncode == 1 and res.stdout.startswith("error: "), (bad, res.stdout)
    res = admit(state, "east", "vision", "1", user="alice")  # the socket is the SlurmUser's
    assert (res.returncode, res.stdout) == (2, "error: hookd did not answer\n")
    (state / "hookd.sock").chmod(0o666)  # opened to everyone, hookd still checks who asks
    res = admit(state, "east", "vision", "1", user="alice")
    assert (res.returncode, res.stdout) == (1, "error: permission denied\n")
    with ledger.reader(cfg) as lg:  # type: ignore[union-attr]
        assert {(r["cluster"], r["account"], r["tokens"]) for r in lg.commitments()} == {
            ("east", "vision", 600),
            ("west", "vision", 400),
            ("west", "research", 5),
        }
        assert lg.account("vision")["balance"] == 1_000 and lg.check() == []
    hookd.send_signal(signal.SIGTERM)
    hookd.wait(timeout=60)
    res = admit(state, "east", "vision", "1")  # no hookd: a refusal, never a free pass
    assert (res.returncode, res.stdout) == (2, "error: hookd did not answer\n")


def test_admission_when_the_shared_ledger_is_away_is_refused_quickly(cluster: None, state: Path) -> None:
    """hookd on a MariaDB ledger whose server does not answer: the question is answered with an error
    (slurmctld would refuse the job) before the client gives up, and asked again moments later it is
    refused at once, without another wait on the server."""
    options = state / "ledger.cnf"
    options.write_text("[client]\nhost = 127.0.0.1\nport = 9\nuser = nobody\npassword = x\ndatabase = none\n")
    shutil.chown(options, "slurm", "slurm")
    options.chmod(0o600)
    text = (state / "config.toml").read_text()
    (state / "config.toml").write_text(
        text.replace("[ledger]\n", f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{options}"\n')
    )
    proc = start_hookd(state)
    try:
        first = admit(state, "east", "vision", "1")
        assert first.returncode == 1 and first.stdout.startswith("error: "), first.stdout
        assert "did not answer" not in first.stdout  # hookd's answer, not the client's timeout
        again = admit(state, "east", "vision", "1")
        assert again.returncode == 1 and again.stdout.startswith("error: the ledger was slow to answer moments ago"), (
            again.stdout
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


SHARED_DRIVER = """
local messages = {}
slurm = {SUCCESS = 0, ERROR = -1, ESLURM_ACCOUNTING_POLICY = 2050, jobs = {},
         log_user = function(m) messages[#messages + 1] = m end}
dofile(arg[1])
for _, account in ipairs({"vision", "vision", "VISION", "x';touch /tmp/slurm-yolo-pwned;'"}) do
  messages = {}
  local desc = {time_limit = 1, partition = "p", tres_per_node = "gres:gpu:1", min_nodes = 1, max_nodes = 1,
                account = account}
  local rc = slurm_job_submit(desc, {p = {default_time = 4294967294, max_time = 4294967295, flag_default = 1}}, 1000)
  print(rc .. " " .. (messages[1] or ""))
end
"""


def test_the_real_script_on_a_shared_ledger_asks_hookd(cluster: None, state: Path, mariadb_options: Path) -> None:
    """job_submit.lua as slurmctld runs it (Lua 5.1, the real hook client, a real hookd, a MariaDB
    ledger): the ledger decides, a refusal names every cluster's part, no answer refuses, and an
    account name that is no Slurm name never reaches a shell."""
    lua = shutil.which("lua5.1")
    assert lua is not None, "deploy/install installs lua5.1"
    options = state / "ledger.cnf"  # where hookd (the SlurmUser) can reach it
    shutil.copy2(mariadb_options, options)
    shutil.chown(options, "slurm", "slurm")
    text = (state / "config.toml").read_text()
    (state / "config.toml").write_text(
        text.replace(
            "[ledger]\n", f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{options}"\ndefault_price = 10\n'
        )
    )
    cfg = config_mod.load(state / "config.toml", env={"SLURM_YOLO_HOME": str(state)})
    script = state / "job_submit.lua"
    script.write_text(availability.script(cfg, "east"))
    (state / "driver.lua").write_text(SHARED_DRIVER)
    with ledger.writer(cfg) as lg:  # published: "shared 1", vision's 1,000, the price of 10 per GPU-second
        lg.credit("vision", 1_000, "test")

    def submit_all() -> list[str]:
        res = subprocess.run(
            [lua, str(state / "driver.lua"), str(script)], capture_output=True, text=True, timeout=120, check=True
        )
        return res.stdout.splitlines()

    Path("/tmp/slurm-yolo-pwned").unlink(missing_ok=True)
    nobody = submit_all()  # no hookd: every GPU job refused
    assert all(line.startswith("-1 slurm-yolo: the shared token ledger did not answer") for line in nobody[:2]), nobody
    proc = start_hookd(state)
    try:
        ok, second, shouted, hostile = submit_all()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert ok == "0 "  # 60 s x 1 GPU x 10 = 600 of the ledger's 1,000
    assert second == (
        "2050 slurm-yolo: account vision cannot cover this job: its worst case is 600 tokens (60 s x 1"
        " GPU x 10 tokens/GPU-s on p x rate 1), the account has 400 left across the clusters that share"
        " its budget (balance 1,000, minus 600 for its pending and starting GPU jobs here and 0 for those"
        " on the other clusters)"
    )
    assert shouted == second  # -A VISION is vision, as Slurm folds it (and as the ledger keeps it)
    assert hostile.startswith("2050 slurm-yolo: account x';touch /tmp/slurm-yolo-pwned;' cannot cover this job")
    assert not Path("/tmp/slurm-yolo-pwned").exists()
    with ledger.reader(cfg) as lg:  # type: ignore[union-attr]
        assert [(r["cluster"], r["account"], r["tokens"]) for r in lg.commitments()] == [("east", "vision", 600)]
        assert lg.account("vision")["balance"] == 1_000


def test_the_doctor_asks_hookd_which_config_it_serves(hookd: subprocess.Popen[bytes], state: Path) -> None:
    """A hookd answers the doctor with the config it read at its start: another config's hookd on the
    socket, or this config changed since, is a problem with what to do (a helper playing a new admin
    found a stale hookd passed as answering)."""
    from slurm_yolo.admin import doctor
    from slurm_yolo.controller.hookd import served_config

    path = state / "config.toml"
    served = served_config(state / "hookd.sock")
    assert served == (path.stat().st_mtime, str(path))
    cfg = config_mod.load(path, env={"SLURM_YOLO_HOME": str(state)})
    assert doctor._hookd(cfg) == []
    other = state / "other.toml"
    other.write_text(path.read_text())
    assert [p.what for p in doctor._hookd(config_mod.load(other, env={"SLURM_YOLO_HOME": str(state)}))] == [
        f"the hookd at {state / 'hookd.sock'} serves {path}, this doctor reads {other}"
    ]
    later = path.stat().st_mtime + 5
    os.utime(path, (later, later))  # an admin's edit after hookd started
    assert [(p.what, p.fix) for p in doctor._hookd(cfg)] == [
        (
            f"hookd read {path} before its last change: it holds, settles and admits by the old one",
            "systemctl restart slurm-yolo-hookd",
        )
    ]
