"""The books' pure parts: the AdminComment's text both ways, sacct's comment lines, the balances
published for admission, and the audit's comparison, on a real ledger (SQLite) and made-up sacct
records."""

from __future__ import annotations

import time
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest

from slurm_yolo.core import config
from slurm_yolo.core.billing import comment
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.records import JobRecord, comments_from_sacct
from slurm_yolo.state import availability, books, ledger

SUBMIT = 1_796_000_000
GPU = {"gres/gpu": "1", "cpu": "1"}


@pytest.fixture
def cfg() -> config.Config:
    return config.load()


def run(job_id: int, submit: int = SUBMIT, account: str = "vision") -> ledger.Run:
    return ledger.Run(
        "yolo", job_id, submit, 0, account, "alice", "a100", "normal", Fraction(1), 600, 600, 3000, 1_000_000
    )


def record(job_id: int, state: str = "COMPLETED", elapsed: int = 100, submit: int = SUBMIT) -> JobRecord:
    start = submit + 5
    return JobRecord(
        job_id=job_id,
        submit=submit,
        state=state,
        partition="a100",
        account="vision",
        qos="normal",
        user="alice",
        tres=GPU,
        time_limit=600,
        elapsed=elapsed,
        start=start,
        cluster="yolo",
        end=start + elapsed,
    )


def settle(lg: ledger.Ledger, job_id: int, state: str = "COMPLETED", elapsed: int = 100, submit: int = SUBMIT) -> None:
    r = run(job_id, submit)
    lg.hold(r, 600 * 3000, None, "test")
    lg.settle(r.key, 0 if state == "NODE_FAIL" else elapsed * 3000, state, elapsed, "test")


def test_comment_names_each_run_and_survives_22_05_lowercasing(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        settle(lg, 7, submit=SUBMIT)
        settle(lg, 7, "NODE_FAIL", 40, submit=SUBMIT + 300)  # a requeued job's second run
        [queued] = lg.unwritten_comments()
    text = queued["text"]
    assert text == (
        f"yolo:run={SUBMIT},est=,hold=1800000,charge=300000,refund=1500000,price=3000,rate=1,"
        f"state=COMPLETED,elapsed=100;run={SUBMIT + 300},est=,hold=1800000,charge=0,refund=1800000,"
        "price=3000,rate=1,state=NODE_FAIL,elapsed=40"
    )
    for stored in (text, text.lower()):
        runs = comment.parse(stored)
        assert runs[SUBMIT]["charge"] == "300000" and runs[SUBMIT + 300]["state"] == "NODE_FAIL"
    assert comment.parse("slurm-yolo:worst=5") == {} and comment.parse("an admin's note") == {}


def test_a_comment_is_written_once_and_requeued_when_another_run_settles(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        settle(lg, 8)
        [first] = lg.unwritten_comments()
        lg.comment_done("yolo", 8, first["text"], "sacctmgr failed: slurmdbd down")
        assert lg.unwritten_comments()[0]["attempts"] == 1
        lg.comment_done("yolo", 8, first["text"])
        assert lg.unwritten_comments() == []
        settle(lg, 8, submit=SUBMIT + 60)
        [again] = lg.unwritten_comments()
        lg.comment_done("yolo", 8, first["text"])  # a stale writer's success does not mark the new text
        assert lg.unwritten_comments()[0]["text"] == again["text"] != first["text"]


def test_sacct_comment_lines_keep_bars_and_newlines_inside_the_comment() -> None:
    text = f"12|yolo|{SUBMIT}|a|b\nstill b\n13|yolo|{SUBMIT + 1}|\n14|other|{SUBMIT + 2}|yolo:run=1"
    assert comments_from_sacct(text) == {
        ("yolo", 12, SUBMIT): "a|b\nstill b",
        ("yolo", 13, SUBMIT + 1): "",
        ("other", 14, SUBMIT + 2): "yolo:run=1",
    }


def test_availability_lists_balances_prices_rates_and_held_jobs(cfg: config.Config) -> None:
    t0 = time.time()
    with ledger.writer(cfg) as lg:
        lg.credit("vision", 5_000, "test")
        lg.credit("bad name\naccount vision 99", 1, "test")  # a name that could break a line is left out
        lg.set_price("a100", 3000, t0, "test")
        lg.set_price("a100", 5000, t0 + 86400, "test")
        lg.set_tier("yolo-prod", "0.8")
        lg.set_tier("yolo-explore", "1.5")
        now = time.time()
        lg.hold(run(41), 5, None, "test")
        text = availability.render(cfg, now, lg.accounts(), lg.prices(), lg.tiers(), lg.held_jobs())
    lines = text.splitlines()
    assert lines[0] == "slurm-yolo-availability 4" and f"stamp {int(now)}" in lines
    later = int(t0 + 86400) + 1  # a scheduled price: the script switches to it when it takes effect
    assert [line for line in lines if line.startswith("price a100")] == [
        "price a100 3000 0",
        f"price a100 5000 {later}",
    ]
    assert "account vision 4995 0 0" in lines and "maxrate 1500000" in lines and "held yolo 41" in lines
    assert "rate yolo-prod 800000" in lines and [line for line in lines if line.startswith("account")] == [
        "account vision 4995 0 0"  # no quota: no capacity, no refill
    ]
    assert f"creditwait {int(cfg.ledger.credit_wait_minutes * 60)}" in lines
    assert Path(availability.path(cfg)).read_text().splitlines()[2:] == lines[2:]  # every write published it


def test_audit_finds_each_kind_of_difference(cfg: config.Config) -> None:
    with ledger.writer(cfg) as lg:
        settle(lg, 1)  # agrees with sacct and its comment
        settle(lg, 2, elapsed=90)  # sacct says it ran 100 s
        lg.hold(run(3), 1_800_000, None, "test")  # sacct has its end; the ledger still holds it
        settle(lg, 5)  # sacct never heard of it
        lg.hold(run(6)._replace(cluster="other"), 1000, None, "test")  # another cluster's, on one shared ledger
        settle(lg, 7)  # its AdminComment was changed since
        texts = {r["job_id"]: r["text"] for r in lg.unwritten_comments(cluster="yolo")}
        seven = dict(lg.runs(7, "yolo")[0])
    sacct = [record(1), record(2), record(3), record(4), record(7)]  # 4: a run the ledger never held
    forged = texts[7].replace(f"charge={seven['charge']}", "charge=1")
    comments = {("yolo", 1, SUBMIT): texts[1], ("yolo", 2, SUBMIT): "", ("yolo", 7, SUBMIT): forged}
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, sacct, comments, time.time() + 60, 0, "yolo")
    by = {(f.kind, f.key.split(":")[1]) for f in found}
    assert by == {
        ("differs", "2"),
        ("comment", "2"),
        ("unsettled", "3"),
        ("missing-in-ledger", "4"),
        ("missing-in-sacct", "5"),
        ("comment", "7"),
    }
    [detail] = [f.detail for f in found if f.key.split(":")[1] == "7"]  # in the comment's own words
    hold, charge, refund = seven["hold"], seven["charge"], seven["refund"]
    assert detail == (
        f"AdminComment says hold={hold}, charge=1, refund={refund}, state=COMPLETED;"
        f" the ledger hold={hold}, charge={charge}, refund={refund}, state=COMPLETED"
    )


def test_audit_knows_slurmdbd_rewrites_a_requeued_finished_run_as_requeued(cfg: config.Config) -> None:
    """`scontrol requeue` of a finished job: slurmdbd shows its ended run as REQUEUED, its elapsed
    stretched to the requeue. The run owes what it owed as it ended (COMPLETED: its 100 s), no
    finding; a ledger whose own numbers disagree still shows."""
    with ledger.writer(cfg) as lg:
        settle(lg, 11)
        settle(lg, 12, "NODE_FAIL", 40)  # refunded as it ended: still refunded, whatever sacct says now
        r = run(13)
        lg.hold(r, 600 * 3000, None, "test")
        lg.settle(r.key, 1, "COMPLETED", 100, "test")  # charged 1 token for 100 s: wrong on its own terms
        texts = {r["job_id"]: r["text"] for r in lg.unwritten_comments()}
    sacct = [record(11, "REQUEUED", 130), record(12, "REQUEUED", 170), record(13, "REQUEUED", 130)]
    comments = {("yolo", job, SUBMIT): text for job, text in texts.items()}
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, sacct, comments, time.time() + 60, 0, "yolo")
    assert [(f.kind, f.key.split(":")[1]) for f in found] == [("differs", "13")]


def test_audit_keeps_a_run_s_first_end_when_a_backup_controller_ends_it_again(cfg: config.Config) -> None:
    """A backup controller that took over from state saved before a run's end ends it again at its
    limit: slurmdbd's record becomes a TIMEOUT that ended after the ledger had settled the real end
    (COMPLETED, 3 s). No finding. A TIMEOUT that had ended before the ledger settled something else is
    one (tests/controller/test_failover_cluster.py runs the real thing)."""
    submit = int(time.time()) - 100  # the run started at submit + 5 and ended 3 s later
    with ledger.writer(cfg) as lg:
        settle(lg, 21, "COMPLETED", 3, submit)
        settle(lg, 22, "COMPLETED", 3, submit)
        texts = {r["job_id"]: r["text"] for r in lg.unwritten_comments()}
    again = record(21, "TIMEOUT", 600, submit)  # ends 500 s from now: after the ledger settled
    before = record(22, "TIMEOUT", 60, submit)  # ended 35 s ago, before the ledger settled
    comments = {("yolo", job, submit): text for job, text in texts.items()}
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, [again, before], comments, time.time() + 600, 0, "yolo")
    assert [(f.kind, f.key.split(":")[1]) for f in found] == [("differs", "22")]


def test_audit_keeps_a_run_s_first_end_when_the_rewrite_reached_slurmdbd_after_the_settlement(
    cfg: config.Config,
) -> None:
    """The controller in charge ended a run again a second after its real end, and slurmdbd got that
    record after the ledger had settled the real one (COMPLETED 3 s, then COMPLETED 4 s, which ended
    before the settlement): slurmctld's epilog of the job came again after the settlement, and no
    later run of it was held. No finding (41). Each of these is one (CI's failover test, 11fddbf: 5 of
    10 such runs; the others from a review): no epilog again (42); a later run of the job held (43);
    an epilog the sweep wrote (44), or not slurmctld's (45); a run the admin released (46); a record
    far longer than a controller's takeover explains (47)."""
    submit = int(time.time()) - 100  # started at submit + 5, really ended 3 s later, long settled
    long_ago = submit - 600  # 47: its record ends 91 s ago, REWRITE_SECONDS + 1 longer than its 3 s
    epilog = {"ended": "1", "estimate": "", "summary": "", "uid": "1001"}
    with ledger.writer(cfg) as lg:
        for job in (41, 42, 43, 44, 45):
            settle(lg, job, "COMPLETED", 3, submit)
        settle(lg, 47, "COMPLETED", 3, long_ago)
        r = run(46, submit)
        lg.hold(r, 600 * 3000, None, "test")
        lg.release(r.key, 0, "test", "an admin's release")
        time.sleep(0.01)
        for job in (41, 43, 46, 47):
            lg.receive("yolo", job, "epilog", epilog)  # the controller in charge ends it again
        lg.receive("yolo", 44, "epilog", epilog | {"ended": "", "swept": "1"})
        lg.receive("yolo", 45, "epilog", epilog | {"ended": ""})
        lg.hold(run(43, submit + 50), 600 * 3000, None, "test")  # 43 ran again: a later run of the job
        texts = {r["job_id"]: r["text"] for r in lg.unwritten_comments()}
    sacct = [record(job, "COMPLETED", 4, submit) for job in (41, 42, 43, 44, 45, 46)]
    sacct.append(record(47, "COMPLETED", 3 + books.REWRITE_SECONDS + 1, long_ago))
    comments = {("yolo", job, long_ago if job == 47 else submit): text for job, text in texts.items()}
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, sacct, comments, time.time() + 6000, 0, "yolo")
    assert sorted(int(f.key.split(":")[1]) for f in found if f.kind == "differs") == [42, 43, 44, 45, 46, 47]


def test_audit_names_a_run_a_controller_ran_again_under_a_settled_key(cfg: config.Config) -> None:
    """A controller that took over from state saved before the old one ended a run (COMPLETED, 4 s,
    settled) ran it again under the same key: slurmdbd's record is the second run's (COMPLETED 3 s),
    started after the settlement, and slurmctld's epilog of the job came again. The ledger's
    settlement stands and the unbilled run is named (51; CI's failover test, e8d1c84). Each of these
    differs instead: no epilog again (52); started longer after the settlement than a takeover
    explains (53); a later run of the job held (54)."""
    submit = int(time.time()) - 100
    epilog = {"ended": "1", "estimate": "", "summary": "", "uid": "1001"}
    with ledger.writer(cfg) as lg:
        for job in (51, 52, 53, 54):
            settle(lg, job, "COMPLETED", 4, submit)
        time.sleep(0.01)
        for job in (51, 53, 54):
            lg.receive("yolo", job, "epilog", epilog)
        lg.hold(run(54, submit + 50), 600 * 3000, None, "test")
        texts = {r["job_id"]: r["text"] for r in lg.unwritten_comments()}
    now = int(time.time())
    sacct = [record(job, "COMPLETED", 3, submit)._replace(start=now + 9, end=now + 12) for job in (51, 52, 54)]
    late = now + books.REWRITE_SECONDS + 2
    sacct.append(record(53, "COMPLETED", 3, submit)._replace(start=late, end=late + 3))
    comments = {("yolo", job, submit): text for job, text in texts.items()}
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, sacct, comments, time.time() + 6000, 0, "yolo")
    assert sorted(int(f.key.split(":")[1]) for f in found if f.kind == "differs") == [52, 53, 54]
    [again] = [f for f in found if f.kind == "run-again"]
    assert (again.key.split(":")[1], again.detail) == (
        "51",
        "COMPLETED after 3 s under the key of a settled run, not billed (the ledger's COMPLETED 4 s stands)",
    )


def test_audit_keeps_a_requeue_s_first_launch_when_slurmdbd_moves_its_start_to_a_second(cfg: config.Config) -> None:
    """A controller that took over launched again a run the old one had launched; the node refused it
    and the run was requeued. The ledger settled REQUEUED from the first launch (76 s); slurmdbd then
    moved the record's start to the second launch, after the ledger held the run (1 s). No finding.
    A REQUEUED record that started before the hold and differs is one."""
    submit = int(time.time()) - 100
    with ledger.writer(cfg) as lg:
        settle(lg, 31, "REQUEUED", 76, submit)
        settle(lg, 32, "REQUEUED", 76, submit)
        texts = {r["job_id"]: r["text"] for r in lg.unwritten_comments()}
    now = int(time.time())
    moved = record(31, "REQUEUED", 1, submit)._replace(start=now + 75, end=now + 76)
    shorter = record(32, "REQUEUED", 1, submit)  # started at submit + 5, before the ledger held it
    comments = {("yolo", job, submit): text for job, text in texts.items()}
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, [moved, shorter], comments, time.time() + 600, 0, "yolo")
    assert [(f.kind, f.key.split(":")[1]) for f in found] == [("differs", "32")]


def test_sweeps_ask_sacct_a_day_at_a_time_and_one_failing_day_spares_the_rest(home: Path) -> None:
    """A week is seven sacct calls; the one sacct fails (here: the oldest day) is reported, the other
    days are read, and the ledger's own checks still run."""
    from slurm_yolo.slurm import commands

    assert commands.days(0, 2.5 * 86400) == [(0, 86400), (86400, 172800), (172800, 216000)]
    fake = home / "bin"
    fake.mkdir()
    calls = home / "calls"
    oldest = time.strftime("%Y-%m-%dT%H", time.localtime(time.time() - 7 * 86400))
    (fake / "sacct").write_text(
        f'#!/bin/sh\necho "$@" >> {calls}\ncase "$*" in *"-S {oldest}"*) exit 1;; esac\nexit 0\n'
    )
    (fake / "sacct").chmod(0o755)
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{fake}"\n')
    cfg = config.load()
    with ledger.writer(cfg) as lg:
        lg.credit("vision", 10, "test")
    found = books.audit(cfg, 7, 0)
    assert [f.kind for f in found] == ["unread"]
    assert len(calls.read_text().splitlines()) == 7 + 6  # each day's runs, and the comments of the six read


@pytest.mark.parametrize(
    "target, cluster, text",
    [
        ("12", "yolo", "yolo:run=1,charge=5\nmodify job where jobid=13 set AdminComment=free"),  # a second command
        ("12", "yolo", "yolo:run=1 charge=5"),  # a space: another word
        ("12", "yolo", 'yolo:run=1,"charge=5"'),
        ("12 13", "yolo", "yolo:run=1"),
        ("12", "yolo where jobid=13", "yolo:run=1"),
        ("12", "", "yolo:run=1"),
    ],
)
def test_a_comment_that_could_change_sacctmgr_s_line_is_never_sent(
    tmp_path: Path, target: str, cluster: str, text: str
) -> None:
    """sacctmgr reads the batch's commands one per line: what could add a line or a word is refused
    before sacctmgr starts (a sacctmgr in ``bin_dir`` that would leave a mark shows it never ran)."""
    (tmp_path / "sacctmgr").write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\n")
    (tmp_path / "sacctmgr").chmod(0o755)
    out = commands.set_admin_comments([commands.AdminComment(12, target, cluster, text)], bin_dir=tmp_path)
    assert out == ["job 12: not a comment sacctmgr can take on one line"]
    assert not (tmp_path / "ran").exists()


def test_audit_leaves_exempt_runs_off_the_books_and_keeps_one_held_before(cfg: config.Config) -> None:
    """A run on an exempt partition or of an exempt account was never held, by the site's choice: no
    finding. One held before its partition became exempt is still compared."""
    cfg = replace(cfg, ledger=replace(cfg.ledger, exempt_partitions=("free",), exempt_accounts=("ops",)))
    with ledger.writer(cfg) as lg:
        lg.hold(run(23)._replace(partition="free"), 600 * 3000, None, "test")  # held before "free" was exempt
    sacct = [
        record(21)._replace(partition="free"),
        record(22)._replace(account="ops"),
        record(23)._replace(partition="free"),
        record(24),
    ]
    with ledger.reader(cfg) as lg:
        found = books._compare(lg, cfg, sacct, {}, time.time() + 60, 0, "yolo")
    assert {(f.kind, f.key.split(":")[1]) for f in found} == {("unsettled", "23"), ("missing-in-ledger", "24")}
