"""The books in two places: the ledger, and sacct (each settled job's AdminComment). Writing the
second from the first until sacctmgr takes it, and auditing one against the other.

A settlement queues its job's AdminComment in the same transaction (``ledger.comment``); the hook
that settled it starts ``ledger comments`` detached, and cron runs it again, so a comment that
slurmdbd could not take (down, or not yet holding the job) lands once it can. ``audit`` reads every
run of every job in a window from sacct, recomputes what each GPU run should have paid from
sacct's own facts and the price and rate the ledger held it at, and lists what differs: runs
missing on either side, amounts or end states that differ, runs settled more than once, comments
missing or disagreeing. Cron runs it; ``alerts`` and the metrics report its last findings.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core.billing import comment, policy
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError, UnreachableError
from slurm_yolo.slurm import commands, visibility
from slurm_yolo.slurm.records import JobRecord
from slurm_yolo.state import db, ledger
from slurm_yolo.state.ledger import store

AUDIT_NAME = "audit.json"
MAX_AUDIT_BYTES = 16 << 20


class Finding(NamedTuple):
    kind: str  # missing-in-ledger, unsettled, missing-in-sacct, differs, run-again, comment, books, unread (a day sacct did not answer)
    key: str  # the run (cluster:job:submit), or the account for the ledger's own invariants
    detail: str


CHUNK = 50  # AdminComments per sacctmgr: slurmdbd takes about 0.25 s apiece here; a chunk is what a timeout loses


class Written(NamedTuple):
    written: int
    failed: list[str]  # one line per comment that did not land
    left: int  # comments still queued after this pass


def write_comments(config: Config, limit: int | None = None) -> Written:
    """Write the queued AdminComments (the first ``limit``; None: all), oldest and least tried first,
    a chunk per sacctmgr; a chunk slurmdbd does not answer ends the pass (the rest stay queued)."""
    if not config.ledger.admin_comment:
        return Written(0, [], 0)
    lg = ledger.reader(config)
    if lg is None:
        return Written(0, [], 0)
    with lg:
        home = commands.home_cluster(config.bin_dir)  # sacctmgr writes its own cluster's
        queued = [(r["cluster"], r["job_id"], r["text"]) for r in lg.unwritten_comments(limit, home)]
    written, failed = 0, list[str]()
    for at in range(0, len(queued), CHUNK):
        done, lost, down = _write_chunk(config, queued[at : at + CHUNK])
        written, failed = written + done, failed + lost
        if down:  # the rest stay queued, untried
            break
    lg = ledger.reader(config)
    if lg is None:
        return Written(written, failed, 0)
    with lg:
        return Written(written, failed, lg.unwritten_count(home))


def _write_chunk(config: Config, queued: list[tuple[str, int, str]]) -> tuple[int, list[str], bool]:
    """One sacctmgr for the chunk (one sacct first: each job's own name); what it cannot confirm,
    one sacctmgr apiece, checked exactly. How many landed, why the others did not, and whether
    slurmdbd did not answer."""
    bin_dir = config.bin_dir
    try:  # an array task's own name, a hetjob component's
        targets = commands.comment_targets(sorted({job for _, job, _ in queued}), bin_dir=bin_dir)
    except SlurmYoloError as e:
        return 0, [f"{len(queued)} AdminComment(s) left queued: {e}"], True
    batch = [commands.AdminComment(job, targets[job], cluster, text) for cluster, job, text in queued if job in targets]
    errors = {(cluster, job): "sacct does not show the job yet" for cluster, job, _ in queued if job not in targets}
    down = False
    try:
        outcomes = commands.set_admin_comments(batch, bin_dir=bin_dir)
        retry = [c for c, error in zip(batch, outcomes, strict=True) if error]
    except UnreachableError as e:  # slurmdbd down or too slow: each alone would fail the same way
        outcomes, retry, down = [str(e)] * len(batch), [], True
    except SlurmYoloError as e:
        outcomes, retry = [str(e)] * len(batch), batch
    errors |= {(c.cluster, c.job_id): error for c, error in zip(batch, outcomes, strict=True)}
    errors |= _one_by_one(retry, bin_dir)
    with ledger.writer(config, publish=False) as w:  # comments move no token: nothing to publish
        w.comments_done((cluster, job, text, errors[cluster, job]) for cluster, job, text in queued)
    failed = [f"{cluster}:{job}: {errors[cluster, job]}" for cluster, job, _ in queued if errors[cluster, job]]
    return len(queued) - len(failed), failed, down


def _one_by_one(comments: list[commands.AdminComment], bin_dir: Path) -> dict[tuple[str, int], str]:
    """Each comment with a sacctmgr of its own, which must name that job and no other."""
    errors = {}
    for c in comments:
        try:
            commands.set_admin_comment(c.job_id, c.target, c.cluster, c.text, bin_dir=bin_dir)
            errors[c.cluster, c.job_id] = ""
        except SlurmYoloError as e:
            errors[c.cluster, c.job_id] = str(e)
    return errors


def audit(config: Config, window_days: float, min_age: float) -> list[Finding]:
    """Every difference between sacct and the ledger for runs of the last ``window_days`` that ended
    (or were held) more than ``min_age`` seconds ago."""
    now = time.time()
    since = now - window_days * 86400
    bin_dir = config.bin_dir
    home = commands.home_cluster(bin_dir)  # its own runs: other clusters may share the ledger
    with_comments = bool(config.ledger.admin_comment)
    records: list[JobRecord] = []
    comments: dict[tuple[str, int, int], str] = {}
    unread: list[Finding] = []
    for start, end in commands.days(since, now):  # a day at a time: one that times out spares the rest
        try:
            day = commands.runs_since(start, bin_dir=bin_dir, until=end)
            if with_comments:
                comments |= commands.admin_comments(since=start, until=end, bin_dir=bin_dir)
        except SlurmYoloError as e:
            unread.append(Finding("unread", time.strftime("%Y-%m-%dT%H:%M", time.localtime(start)), str(e)))
            continue
        records += [r for r in day if r.final or r.start]  # what can be billed: runs that started
    lg = ledger.reader(config)
    if lg is None:
        return [Finding("books", "-", f"no ledger at {ledger.where(config)}")]
    with lg:
        # sacct's window leaves out runs that ended the second they started: ask for those by id
        known = {ledger.run_key(r.cluster, r.job_id, r.submit) for r in records}
        missing = sorted(
            {row["job_id"] for row in lg.held_between(since, now - min_age, home) if row["job_key"] not in known}
        )
        for chunk in (missing[i : i + 500] for i in range(0, len(missing), 500)):
            records += [r for runs in commands.job_runs(chunk, bin_dir=bin_dir).values() for r in runs]
            if with_comments:
                comments |= commands.admin_comments(chunk, bin_dir=bin_dir)
        joined = lg.joined_at(home)  # runs that started before were billed elsewhere (or nowhere: not here)
        records = [
            r
            for r in records
            if not r.start
            or (joined is not None and r.start >= int(joined))
            or lg.run(ledger.run_key(r.cluster, r.job_id, r.submit))
        ]
        return unread + _compare(lg, config, _unique(records), comments, now - min_age, since, home)


def _unique(records: list[JobRecord]) -> list[JobRecord]:
    """One record per run: a run active over two days is in both days' answers."""
    return list({(r.cluster, r.job_id, r.submit): r for r in records}.values())


def _comment_words(fields: dict[str, str], keys: dict[str, str]) -> str:
    """``keys``' fields as an AdminComment writes them (``hold=1, charge=2``), not as a Python dict."""
    return ", ".join(f"{k}={fields.get(k, '')}" for k in keys)


def _compare(
    lg: ledger.Ledger,
    config: Config,
    records: list[JobRecord],
    comments: dict[tuple[str, int, int], str],
    settled_before: float,
    since: float,
    home: str,
) -> list[Finding]:
    findings: list[Finding] = []
    recorded: dict[tuple[str, int], dict[int, dict[str, str]]] = {}
    for (cluster, job_id, _), text in comments.items():
        recorded.setdefault((cluster, job_id), {}).update(comment.parse(text))
    seen = set()
    rules = policy.Rules.of(config.ledger)
    for rec in records:
        key = ledger.run_key(rec.cluster, rec.job_id, rec.submit)
        seen.add(key)
        share = policy.gpus(rec.tres, config.partition(rec.partition).shards_per_gpu)
        row = lg.run(key)
        if not share or not rec.start or not (rec.final and rec.end < settled_before):
            continue
        if row is None and ledger.exempt(rec.partition, rec.account, config):
            continue  # off the books by the site's choice (a run held before it stays on them)
        if row is None:
            findings.append(Finding("missing-in-ledger", key, f"{rec.state} after {rec.elapsed} s, never held"))
            continue
        if row["state"] != "settled":
            findings.append(Finding("unsettled", key, f"{rec.state} in sacct, still held ({row['hold']})"))
            continue
        state, ran = rec.state, rec.elapsed
        if _run_again(lg, rec, row):
            state, ran = row["end_state"], row["elapsed"]
            detail = f"{rec.state} after {rec.elapsed} s under the key of a settled run, not billed"
            findings.append(Finding("run-again", key, f"{detail} (the ledger's {state} {ran} s stands)"))
        elif _ended_before(lg, rec, row):
            state, ran = row["end_state"], row["elapsed"]
        limit = ledger.limit_seconds(rec.time_limit, config)
        due = policy.charge(state, ran, limit, ledger.run_share(row), row["price"], row["rate_ppm"], rules)
        if (row["charge"], row["end_state"], row["elapsed"]) != (due, state, ran):
            findings.append(
                Finding(
                    "differs",
                    key,
                    f"ledger {row['end_state']} {row['elapsed']} s charged "
                    f"{row['charge']}; sacct {rec.state} {ran} s, due {due}",
                )
            )
        if config.ledger.admin_comment:
            entries = recorded.get((rec.cluster, rec.job_id), {})
            entry = entries.get(rec.submit, entries.get(0) if len(entries) == 1 else None)  # 0: before runs were named
            want = {
                "hold": str(row["hold"]),
                "charge": str(row["charge"]),
                "refund": str(row["refund"]),
                "state": str(row["end_state"]).upper(),
            }
            if entry is None:
                findings.append(Finding("comment", key, "no AdminComment for this run in sacct"))
            elif {k: entry.get(k, "") for k in want} != want:
                said, kept = _comment_words(entry, want), _comment_words(want, want)
                findings.append(Finding("comment", key, f"AdminComment says {said}; the ledger {kept}"))
    for row in lg.held_between(since, settled_before, home):
        if row["job_key"] not in seen:
            findings.append(Finding("missing-in-sacct", row["job_key"], "held in the ledger, no such run in sacct"))
    findings += [Finding("books", "-", problem) for problem in lg.check()]
    return findings


# How much later than its real end a controller taking over ends a run again, at most: it takes over
# within SlurmctldTimeout (120 s by default) and ends the run when the node answers it; 600 s leaves a
# site's longer timeout room, and bounds what the audit lets pass as such a rewrite.
REWRITE_SECONDS = 600


def _ended_before(lg: ledger.Ledger, rec: JobRecord, row: store.Row) -> bool:
    """A run ends once: the ledger settled it from sacct's final record of that end, and a later rewrite
    of the record does not change what it owed. Two are known. `scontrol requeue` of a finished job
    makes slurmdbd rewrite the run as REQUEUED, its elapsed stretched to the requeue (22.05 and 24.11).
    Two more come with a change of controller (tests/controller/test_failover_cluster.py). One that takes over from
    state saved before the run's end (the primary died in between) still counts it as running, and
    ends it again, at its time limit or when the node tells it: slurmdbd then holds a TIMEOUT, or a
    longer COMPLETED, that ended after the ledger had settled the run's real end. One that launches again a run the old one had launched (the node says
    "Duplicate jobid") requeues it: the ledger settles the REQUEUED run from its first launch, and
    slurmdbd later moves the record's start to the second launch, after the ledger held the run.

    The ended-again record is known by its end after the ledger's settlement or, where slurmdbd got it
    later than the ledger settled (its end a second after the real one, the settlement a few seconds
    after it on a loaded host), by slurmctld's epilog of the job coming again after the settlement
    and within REWRITE_SECONDS of the record's end, with no later run of the job held: a COMPLETED or
    TIMEOUT that the ledger settled, rewritten as one at most REWRITE_SECONDS longer. (The ledger keeps
    no start: its end, start + its elapsed, must be before its settlement.)"""
    if rec.state == "REQUEUED":
        if row["end_state"] != "REQUEUED":
            return True
        return rec.start > float(row["held_at"]) + 1 and rec.elapsed < int(row["elapsed"])
    if (row["end_state"], row["elapsed"]) == (rec.state, rec.elapsed):
        return False
    settled = float(row["settled_at"])
    if not (rec.start > 0 and rec.start + int(row["elapsed"]) <= settled):
        return False
    if settled < rec.end:
        return True
    return (
        row["end_state"] in ("COMPLETED", "TIMEOUT")
        and rec.state in ("COMPLETED", "TIMEOUT")
        and 0 < rec.elapsed - int(row["elapsed"]) <= REWRITE_SECONDS
        and _ended_again_alone(lg, rec, row)
    )


def _run_again(lg: ledger.Ledger, rec: JobRecord, row: store.Row) -> bool:
    """A controller that took over from state saved before the old one ended a run (which the ledger
    then settled) runs it again under the same key: the record is that second run's, started after
    the settlement, and the key, settled, holds nothing for it. The ledger's settlement stands (the
    user asked for one run); the audit names the unbilled run for the admin ("run-again"). Known by
    a start after the settlement, within REWRITE_SECONDS of it, and slurmctld's epilog of the job
    again; without that evidence the record differs."""
    settled = float(row["settled_at"])
    return 0 < rec.start - settled <= REWRITE_SECONDS and _ended_again_alone(lg, rec, row)


def _ended_again_alone(lg: ledger.Ledger, rec: JobRecord, row: store.Row) -> bool:
    """slurmctld's epilog of the job came again after the ledger settled ``row`` (up to
    REWRITE_SECONDS after the record's end), and no later run of the job was held: the record is the
    same run's, ended (or run) again by a controller that took over, not a new run owing its own."""
    return lg.ended_again(rec.cluster, rec.job_id, float(row["settled_at"]), rec.end + REWRITE_SECONDS) and not any(
        r["job_key"] != row["job_key"] and float(r["held_at"]) > float(row["held_at"])
        for r in lg.runs(rec.job_id, rec.cluster)
    )


def audit_path(config: Config) -> Path:
    return config.public_dir / AUDIT_NAME


def requeue_comments(config: Config, findings: list[Finding]) -> int:
    """Queue again the AdminComments the audit found missing or wrong in sacct (slurmdbd took them,
    then lost them to a later record); cron's ``ledger comments`` writes them. How many."""
    jobs = set()
    for f in findings:
        cluster, _, rest = f.key.partition(":")
        if f.kind == "comment" and rest.split(":")[0].isdigit():
            jobs.add((cluster, int(rest.split(":")[0])))
    if jobs:
        with ledger.writer(config) as lg:
            for cluster, job_id in sorted(jobs):
                lg.requeue_comment(cluster, job_id)
    return len(jobs)


def save(config: Config, findings: list[Finding], window_days: float) -> None:
    """The last audit, for ``alerts`` and the metrics: written as the state's owner (root's run too,
    so that ``last`` accepts it), atomically."""
    target = audit_path(config)
    with db.as_state_owner(config.state_dir, config.paths.owner):
        tmp = db.public_folder(target.parent) / f".{AUDIT_NAME}.{os.getpid()}"
        tmp.write_text(
            json.dumps({"at": time.time(), "window_days": window_days, "findings": [f._asdict() for f in findings]})
            + "\n"
        )
        tmp.chmod(0o600 if visibility.hides_jobs(config) else 0o644)  # its findings name jobs
        os.replace(tmp, target)


class LastAudit(NamedTuple):
    at: float
    findings: list[dict[str, str]]


def last(config: Config) -> LastAudit | None:
    """The last saved audit, or None (never run, or not a regular file its owner wrote)."""
    from slurm_yolo.parse import read_bytes

    path = audit_path(config)
    try:
        raw, size = read_bytes(path, MAX_AUDIT_BYTES, owner=path.parent.stat().st_uid)
        data = json.loads(raw) if size <= MAX_AUDIT_BYTES else None
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        return None
    found = [{str(k): str(v) for k, v in f.items()} for f in data["findings"] if isinstance(f, dict)]
    return LastAudit(float(data.get("at") or 0), found)
