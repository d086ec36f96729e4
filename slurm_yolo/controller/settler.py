"""The settler: the one place where ended runs become settlements, from the inbox and from sacct.

hookd records each epilog it acknowledges in the ledger's inbox (committed before it answers), so a
kill or an OOM loses none. The settler takes the due rows in batches, asks sacct once for all their
jobs (no lock held meanwhile), settles every ended run from slurmdbd's final record (the billing
policy, ``billing.policy``), and marks each row done, or due again later while sacct is behind or
slurmdbd is down (an incident once a run is ``LATE_SECONDS`` late; past ``ledger.reconcile_days`` the
row is given up and the hold stays, for the audit to report). The side work a settlement or a hold
asks for (the account's Slurm limit, AdminComments, the time model's feedback, a prolog's own
cancel) goes to ``Followups``: done in turn by one worker thread in hookd, inline elsewhere; never a
detached child. ``ledger reconcile`` (cron) is the same settler over every open row, plus a sweep of
sacct for what no hook reported (a failed prolog, an epilog slurmctld never ran).
"""

from __future__ import annotations

import json
import math
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, NamedTuple

from slurm_yolo.controller.relimit import relimit
from slurm_yolo.core.billing import policy
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.parse import beacon
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.records import FINAL_STATES, JobRecord
from slurm_yolo.state import books, ledger
from slurm_yolo.state.eventlog import log_event

if TYPE_CHECKING:
    from slurm_yolo.state.ledger import store

RunsLookup = Callable[[list[int]], dict[int, list[JobRecord]]]

RETRY_SECONDS = (0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)  # before asking sacct again, by attempt
LATE_SECONDS = 900.0  # a run this late in sacct is an incident (the row is still tried)
BATCH = 500  # inbox rows a batch takes at most
COMMITMENT_GRACE_SECONDS = (
    5.0  # an admission's count outlives slurmctld's job list refresh (1 s) and its recent window (2 s)
)
SHARED_POLL_SECONDS = 2.0  # how stale the admission file may go behind another controller's or cluster's write
# A held run whose epilog is this late while slurmctld no longer runs it is settled as if it had come
# (``Settler._orphans``); slurmctld is asked at most this often.
ORPHAN_AGE_SECONDS = 10.0
ORPHAN_POLL_SECONDS = 15.0
TAKEOVER_SECONDS = 120  # SlurmctldTimeout when Slurm does not say (its own default)


def orphan_grace(slurmctld_timeout: str) -> float:
    """How long a swept run waits before it is settled: a backup controller takes over within
    ``SlurmctldTimeout`` of silence and may end the run again (sacct's record then changes, and its
    own epilog comes): twice that, and a minute (pure; ``scontrol show config``'s ``30 sec``)."""
    words = slurmctld_timeout.split()
    seconds = int(words[0]) if words and words[0].isdigit() else TAKEOVER_SECONDS
    return 2.0 * seconds + 60.0


def billable_run(
    lg: ledger.Ledger, record: JobRecord, cluster: str, config: Config, at: float, restart: int
) -> tuple[ledger.Run, int] | None:
    """The run and what it holds: its time limit (or the configured cap) x its GPUs x the partition's
    price at ``at`` x its QOS tier's rate (``cluster``'s own, where it has them). None for a run without
    GPUs (not metered) and for one on an exempt partition or account (``policy.exempt``)."""
    share = policy.gpus(record.tres, config.partition(record.partition).shards_per_gpu)
    if not share or ledger.exempt(record.partition, record.account, config):
        return None
    seconds = ledger.limit_seconds(record.time_limit, config)
    price = lg.price_at(record.partition, at, int(config.ledger.default_price), cluster)
    rate = lg.tier_rate(record.qos, cluster)
    run = ledger.Run(
        cluster,
        record.job_id,
        record.submit,
        restart,
        record.account,
        record.user,
        record.partition,
        record.qos,
        share,
        record.time_limit,
        seconds,
        price,
        rate,
    )
    return run, policy.tokens(seconds, share, price, rate)


Settled = tuple[JobRecord, "store.Row", ledger.Settlement]


def settle_runs(
    lg: ledger.Ledger, runs: list[JobRecord], config: Config, actor: str, cluster: str = "", estimate: int | None = None
) -> list[Settled]:
    """Settle every run in ``runs`` (sacct's records of one job, oldest first) that has ended and is
    not settled yet; a run that was never held (its prolog failed) is held first, at the price in
    effect when it started. Runs still going on are left alone, and so are runs that never started
    and hold nothing."""
    done = []
    for restart, rec in enumerate(runs):
        if not rec.final:
            continue
        key = ledger.run_key(rec.cluster or cluster, rec.job_id, rec.submit)
        row = lg.run(key)
        if row is None:
            if not rec.start:
                continue
            found = billable_run(lg, rec, rec.cluster or cluster, config, rec.start, restart)
            if found is None:
                continue
            lg.hold(found[0], found[1], estimate, actor=actor)
            row = lg.run(key)
        if row is None or row["state"] != "held":
            continue
        limit = ledger.limit_seconds(rec.time_limit, config)  # the limit at the end: a TIMEOUT pays it at least
        amount = policy.charge(
            rec.state,
            rec.elapsed,
            limit,
            ledger.run_share(row),
            row["price"],
            row["rate_ppm"],
            policy.Rules.of(config.ledger),
        )
        settled = lg.settle(key, amount, rec.state, rec.elapsed, actor=actor)
        if settled is not None:
            done.append((rec, row, settled))
    return done


def unfinished(lg: ledger.Ledger, runs: list[JobRecord], cluster: str, job_id: int, ended: bool) -> bool:
    """Whether sacct has yet to report the end of a run of this job that started (slurmctld tells
    slurmdbd asynchronously: an epilog can be ahead of it, even of the run's start). ``ended``: the
    event says a run just ended (slurmctld's own epilog), so sacct is behind until its newest record
    is final. Otherwise a held run sacct does not know yet counts, and one it shows never started
    (an epilog run by hand on a pending job) does not."""
    if ended and not (runs and runs[-1].final):
        return True
    by_key = {ledger.run_key(r.cluster or cluster, r.job_id, r.submit): r for r in runs}
    for row in lg.held_runs(cluster, job_id):
        rec = by_key.get(row["job_key"])
        if rec is None or (rec.start and not rec.final):
            return True
    return any(not r.final and r.start and r.tres for r in runs)


class FeedbackJob(NamedTuple):
    """A completed run whose launcher's summary (``beacon``) may feed its partition's time model."""

    job_id: int
    partition: str
    cluster: str
    uid: int
    elapsed: int
    summary: beacon.Beacon | None
    gpus: int  # whole GPUs Slurm allocated the run (a shard's job: 1): what the summary may claim at most


class Followups:
    """The side work of holds and settlements, done inline (cron, a hook run without hookd). Each
    step catches its own failure: cron's ``ledger enforce`` and ``ledger comments`` repeat them."""

    def __init__(self, config: Config) -> None:
        self.config = config

    def enforce(self, accounts: Iterable[str]) -> None:
        from slurm_yolo.controller import enforcement

        wanted = sorted(set(accounts))
        if wanted and self.config.ledger.enforce:
            self._guard("enforce", lambda: enforcement.sync(self.config, wanted))

    def comments(self) -> None:
        if self.config.ledger.admin_comment:
            self._guard("comments", lambda: books.write_comments(self.config))

    def feedback(self, job: FeedbackJob) -> None:
        from slurm_yolo.controller import feedback

        def step() -> None:
            done = feedback.job_feedback(
                self.config, job.partition, job.job_id, job.summary, job.cluster, job.uid, job.elapsed, job.gpus
            )
            log_event(
                self.config,
                {
                    "event": "feedback",
                    "job": job.job_id,
                    "partition": job.partition,
                    "result": done.reason if done else "no usable summary in its Comment",
                },
            )

        self._guard("feedback", step, job.job_id)

    def relimit(self, rec: JobRecord, row: store.Row, summary: beacon.Beacon | None) -> None:
        """A run requeued for time: its job's next limit, from its own progress, within what admission
        would admit now (``controller.relimit``)."""
        self._guard("relimit", lambda: relimit(self.config, rec, row, summary), rec.job_id)

    def cancel(self, target: str) -> None:
        """Cancel a job now (a prolog's own cancel: hookd's worker, after ``hooks.CANCEL_AFTER``)."""
        self._guard("cancel", lambda: commands.cancel(target, bin_dir=self.config.bin_dir))

    def _guard(self, what: str, step: Callable[[], object], job: int | None = None) -> None:
        try:
            step()
        except Exception as e:  # noqa: BLE001 - side work never undoes a settlement; cron repeats it
            log_event(
                self.config,
                {"event": what, **({"job": job} if job is not None else {}), "alert": f"{type(e).__name__}: {e}"},
            )

    def after(self, settled: list[Settled], facts: Mapping[str, str] | None = None) -> None:
        """What follows settlements: blocked accounts' limits, their AdminComments, and (a completed
        run whose epilog said as whom it ran and what its launcher summed up) the time model's feedback."""
        self.enforce(done.account for _, _, done in settled if done.blocked is not None)
        if settled:
            self.comments()
        summary, uid = (facts or {}).get("summary", ""), (facts or {}).get("uid", "")
        decoded = beacon.decode(summary) if summary else None
        for rec, row, _ in settled:
            if rec.state == "REQUEUED" and decoded:
                self.relimit(rec, row, decoded)
        if not (self.config.ledger.feedback and summary and uid.isdigit()):
            return
        for rec, row, _ in settled:
            if rec.state == "COMPLETED":
                gpus = math.ceil(policy.gpus(rec.tres, self.config.partition(rec.partition).shards_per_gpu))
                elapsed = job_elapsed(self.config, row, rec.elapsed) if int(row["restart"]) > 0 else rec.elapsed
                job = FeedbackJob(rec.job_id, rec.partition, rec.cluster, int(uid), elapsed, decoded, max(1, gpus))
                self.feedback(job)


class Worker(Followups):
    """hookd's followups: one thread does them in turn (at most one Slurm command at a time, however
    many runs end at once); enforcement and AdminComments asked for meanwhile are merged. A prolog's
    cancel of its over-budget job does not wait in that queue (``cancel_after``)."""

    def __init__(self, config: Config) -> None:
        super().__init__(config)
        self._work: queue.Queue[Callable[[], None]] = queue.Queue()
        self._accounts: set[str] = set()
        self._comments = False
        self._lock = threading.Lock()
        threading.Thread(target=self._serve, name="followups", daemon=True).start()

    def enforce(self, accounts: Iterable[str]) -> None:
        with self._lock:
            new = set(accounts) - self._accounts
            self._accounts |= new
        if new:
            self._work.put(self._enforce_now)

    def _enforce_now(self) -> None:
        with self._lock:
            wanted, self._accounts = self._accounts, set()
        super().enforce(wanted)

    def comments(self) -> None:
        with self._lock:
            asked, self._comments = self._comments, True
        if not asked:
            self._work.put(self._comments_now)

    def _comments_now(self) -> None:
        """One chunk, then to the back of the queue while more are left and the chunk wrote some:
        enforcement and feedback asked for meanwhile do not wait behind a backlog."""
        with self._lock:
            self._comments = False
        done: list[books.Written] = []
        self._guard("comments", lambda: done.append(books.write_comments(self.config, limit=books.CHUNK)))
        if done and done[0].written and done[0].left:
            self.comments()

    def feedback(self, job: FeedbackJob) -> None:
        self._work.put(lambda: Followups.feedback(self, job))

    def relimit(self, rec: JobRecord, row: store.Row, summary: beacon.Beacon | None) -> None:
        self._work.put(lambda: Followups.relimit(self, rec, row, summary))

    def cancel_after(self, target: str, seconds: float) -> None:
        """A prolog's cancel of its own over-budget job, on a timer of its own: never behind a backlog
        of AdminComments or feedback in the worker's queue (the job runs, and bills, meanwhile)."""
        timer = threading.Timer(seconds, Followups.cancel, (self, target))
        timer.daemon = True
        timer.start()

    def _serve(self) -> None:
        while True:
            self._work.get()()


def job_elapsed(config: Config, last: store.Row, elapsed: int) -> int:
    """The elapsed seconds of every run of a requeued job, up to its ``last`` (a ledger row, which ran
    ``elapsed``): what its summary's training time (every run's epochs) is capped at, not its last
    run's alone. The runs are the ones before it of the same job id whose restart counts lead down to
    0 (an older job of that id, from before a controller lost its state, ends its own chain)."""
    lg = ledger.reader(config)
    if lg is None:
        return elapsed
    with lg:
        rows = [r for r in lg.runs(int(last["job_id"]), str(last["cluster"])) if r["held_at"] < last["held_at"]]
    total, want = elapsed, int(last["restart"]) - 1
    for r in reversed(rows):
        if want < 0:
            break
        if int(r["restart"]) == want and r["state"] == "settled":
            total, want = total + int(r["elapsed"] or 0), want - 1
    return total


def settle_due(
    config: Config,
    followups: Followups,
    now: float | None = None,
    lookup: RunsLookup | None = None,
    publish: bool = True,
    job: tuple[str, int] | None = None,
) -> list[dict[str, object]]:
    """One batch: the inbox rows due at ``now`` (None: every open row; only one (cluster, job)'s when
    ``job`` says which: a hook's own), settled from one sacct call for all their jobs; each row done,
    or due again later. What was settled."""
    at = time.time()
    with ledger.writer(config, publish=False) as lg:
        rows = lg.due(now, BATCH, job, cluster=None if job else commands.home_cluster(config.bin_dir))
    if not rows:
        return []
    by_job: dict[tuple[str, int], list[store.Row]] = {}
    for row in rows:
        by_job.setdefault((row["cluster"], row["job_id"]), []).append(row)
    try:  # no ledger lock is held across a Slurm call
        found: dict[int, list[JobRecord]] | None = (lookup or _job_runs(config))(sorted({j for _, j in by_job}))
    except SlurmYoloError:
        found = None  # sacct did not answer: every row waits
    out: list[dict[str, object]] = []
    later: list[tuple[list[Settled], dict[str, str]]] = []
    with ledger.writer(config, publish=publish) as lg:
        for (cluster, job_id), mine in by_job.items():
            facts = json.loads(mine[-1]["facts"])
            ids = [r["id"] for r in mine]
            runs = None if found is None else sorted(found.get(job_id, []), key=lambda r: r.submit)
            done: list[Settled] = []
            if runs is None:
                waiting = True
            else:
                estimate = int(facts["estimate"]) if str(facts.get("estimate", "")).isdigit() else None
                done = settle_runs(lg, runs, config, "settler", cluster, estimate)
                waiting = not done and unfinished(lg, runs, cluster, job_id, bool(facts.get("ended")))
            if not waiting:
                lg.inbox_update(ids, f"settled {len(done)}" if done else "nothing held", None)
            else:
                _wait_more(lg, cluster, job_id, mine, at, config)
            later.append((done, facts))
            out += [{"key": s.key, "state": rec.state, "charge": s.charge, "refund": s.refund} for rec, _, s in done]
    for done, facts in later:
        followups.after(done, facts)
    return out


def _wait_more(lg: ledger.Ledger, cluster: str, job_id: int, rows: list[store.Row], at: float, config: Config) -> None:
    """sacct has no final record yet: ask again later; an incident once the run is late, and the row
    given up past the reconcile window (the hold stays, visible, for the audit and an admin)."""
    ids = [r["id"] for r in rows]
    age = at - min(r["received_at"] for r in rows)
    attempts = max(r["attempts"] for r in rows)
    if age > config.ledger.reconcile_days * 86400:
        lg.inbox_update(ids, "given up: sacct never had a final record", None)
        return
    if age > LATE_SECONDS and not any(r["outcome"].startswith("late") for r in rows):
        lg.record_incident(cluster, job_id, "epilog", f"no final sacct record {age:.0f} s after the run ended")
        outcome = "late"
    else:
        outcome = next((r["outcome"] for r in rows if r["outcome"].startswith("late")), "waiting for sacct")
    lg.inbox_update(ids, outcome, at + RETRY_SECONDS[min(attempts, len(RETRY_SECONDS) - 1)])


def _job_runs(config: Config) -> RunsLookup:
    def lookup(job_ids: list[int]) -> dict[int, list[JobRecord]]:
        return commands.job_runs(job_ids, bin_dir=config.bin_dir)

    return lookup


def blocks_apart(
    blocked: set[str], kept: set[str], seen: set[tuple[str, bool]]
) -> tuple[set[tuple[str, bool]], set[str]]:
    """Where the ledger's blocks (``blocked``) and one cluster's (``kept``) disagree, as (account,
    blocked in the ledger); and the accounts to enforce: those whose disagreement is new since the
    last look (``seen``). Each is asked once: an account one Slurm cannot settle (no association
    there) is not asked again at every write, and cron's ``ledger enforce`` retries it. A
    disagreement that turned round is a new one: a block this cluster set a moment after the last
    look saw the ledger blocked, which another cluster's deposit has since funded."""
    apart = {(name, name in blocked) for name in blocked ^ kept}
    return apart, {name for name, _ in apart - seen}


class Settler:
    """hookd's settler thread: a batch whenever an event arrives or a row falls due, and what readers
    see published once per batch (the prologs' holds since the last one too)."""

    def __init__(self, config: Config, followups: Followups, lookup: RunsLookup | None = None) -> None:
        self.config = config
        self.followups = followups
        self.lookup = lookup
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._dirty = True  # publish once at start: what an earlier server left
        self._published: int | None = None  # the ledger's version (``Ledger.version``) last published
        self._apart: set[tuple[str, bool]] = set()  # the last look's disagreements (``blocks_apart``)
        self._joined = False  # this cluster's join recorded (``Ledger.join``)
        self._expire_next = 0.0  # when ``_expire_commitments`` may ask Slurm again
        self._orphans_next = 0.0  # when ``_orphans`` may ask Slurm again
        self._grace: float | None = None  # ``orphan_grace``, asked of slurmctld once
        self.thread = threading.Thread(target=self._serve, name="settler", daemon=True)
        self.thread.start()

    def wake(self) -> None:
        self._wake.set()

    def changed(self) -> None:
        """A hold was written: publish with the next batch."""
        self._dirty = True
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.thread.join(timeout=60)

    def _expire_commitments(self, lg: ledger.Ledger, cluster: str) -> None:
        """On a shared ledger, what this cluster's last admission counted for an account whose jobs
        here have all started or gone since would be counted by the other clusters until this one's
        next admission: it goes once Slurm shows none of the account's jobs pending here. Rows of
        the last few seconds stay (slurmctld's job list, which admission reads, may be a second old)."""
        before = time.time() - COMMITMENT_GRACE_SECONDS
        counted = {str(r["account"]) for r in lg.commitments(cluster) if float(r["counted_at"]) < before}
        if counted:
            lg.forget_commitments(cluster, counted - commands.pending_accounts(self.config.bin_dir), before)

    def _orphans(self, lg: ledger.Ledger, cluster: str) -> None:
        """A held run whose epilog never reached hookd would hold its tokens until cron's reconcile:
        22.05 SIGKILLs PrologSlurmctld and EpilogSlurmctld alike when a job is cancelled while its
        prolog runs, and a user can do that at will. Once such a run is ``ORPHAN_AGE_SECONDS`` old
        and slurmctld runs it no more (the job gone, ended, or on a later run), it goes in the
        inbox as its epilog would have, due after ``orphan_grace`` (a controller taking over may
        end it again, and its own epilog settles it first), and is settled from sacct's record."""
        held = lg.stale_holds(time.time() - ORPHAN_AGE_SECONDS, cluster)
        waiting = {int(r["job_id"]) for r in lg.due(None, BATCH, cluster=cluster)}
        jobs = sorted({int(r["job_id"]) for r in held} - waiting)
        if not jobs:
            return
        try:
            now = commands.current_runs(jobs, self.config.bin_dir)
            if self._grace is None:
                cc = commands.controller_config(self.config.bin_dir, timeout=self.config.slurm.timeout_seconds)
                self._grace = orphan_grace(cc.values.get("SlurmctldTimeout", ""))
        except SlurmYoloError:
            return  # slurmctld not answering: asked again next time (its runs are not orphans meanwhile)
        for job in jobs:
            rec = now.get(job)
            ours = {r["job_key"] for r in held if int(r["job_id"]) == job}
            if rec is not None and rec.state not in FINAL_STATES and ledger.run_key(cluster, job, rec.submit) in ours:
                continue  # its run goes on
            row = lg.receive(
                cluster, job, "epilog", {"summary": "", "uid": "", "estimate": "", "ended": "", "swept": "1"}
            )
            lg.inbox_update([row], "swept: no epilog came", time.time() + self._grace)
            log_event(self.config, {"event": "orphan", "job": job, "cluster": cluster})

    def _follow_blocks(self, lg: ledger.Ledger, cluster: str) -> None:
        """On a shared ledger, another cluster's deposit or charge can fund or dry an account: this
        cluster's Slurm limits follow (``enforcement``) for each account whose block the ledger and
        this cluster disagree on (blocked, and no block kept here; or a block kept here, and funded)."""
        blocked = {
            str(r["name"]) for r in lg.accounts() if r["blocked"] and not ledger.exempt("", r["name"], self.config)
        }
        self._apart, ask = blocks_apart(blocked, set(lg.site_limits(cluster)), self._apart)
        if ask:
            self.followups.enforce(ask)

    def _serve(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            try:
                dirty, self._dirty = self._dirty, False
                settled = settle_due(self.config, self.followups, time.time(), self.lookup, publish=False)
                home = commands.home_cluster(self.config.bin_dir)
                with ledger.writer(self.config, publish=False) as lg:
                    if not self._joined:  # at start: this cluster's runs are kept here from now on
                        lg.join(home)
                        self._joined = True
                    nxt = lg.next_due(home)
                    version = lg.version()
                    if dirty or settled or version != self._published:  # another cluster's or controller's write too
                        ledger.publish_from(lg, self.config)
                        self._published = version
                        if version is not None:
                            self._follow_blocks(lg, home)
                    if version is not None and time.monotonic() >= self._expire_next:
                        self._expire_next = time.monotonic() + COMMITMENT_GRACE_SECONDS  # squeue at most this often
                        self._expire_commitments(lg, home)
                    if time.monotonic() >= self._orphans_next:
                        self._orphans_next = time.monotonic() + ORPHAN_POLL_SECONDS
                        self._orphans(lg, home)
            except Exception as e:  # noqa: BLE001 - the rows stay in the inbox; the next round retries them
                log_event(self.config, {"event": "settler", "alert": f"{type(e).__name__}: {e}"})
                nxt, version = time.time() + 5, None
            longest = ORPHAN_POLL_SECONDS if version is None else SHARED_POLL_SECONDS  # a shared ledger: often
            self._wake.wait(timeout=min(longest, max(0.05, nxt - time.time())) if nxt is not None else longest)


class Reconciled(NamedTuple):
    done: list[dict[str, object]]  # runs settled or held
    unread: list[str]  # the days sacct did not answer for (the rest were reconciled)


def reconcile(
    config: Config, window_days: float | None = None, min_age_seconds: float = 0.0, followups: Followups | None = None
) -> Reconciled:
    """Cron's settler: every open inbox row, then what the hooks missed, from sacct: settle every
    ended GPU run of the last ``window_days`` (``ledger.reconcile_days``) that the ledger has not
    settled, holding first those never held, and those of older holds still open; hold the running
    GPU runs that no prolog held. Runs held less than ``min_age_seconds`` ago are left to their
    epilog. sacct is asked a day at a time: a day it does not answer is reported, the rest done."""
    followups = followups or Followups(config)
    out = settle_due(config, followups)
    bin_dir = config.bin_dir
    now = time.time()
    window = config.ledger.reconcile_days if window_days is None else window_days
    by_run: dict[tuple[int, int], JobRecord] = {}
    unread = []
    for start, end in commands.days(now - window * 86400, now):
        try:
            day = commands.runs_since(start, bin_dir=bin_dir, until=end)
        except SlurmYoloError as e:
            unread.append(f"{time.strftime('%Y-%m-%dT%H:%M', time.localtime(start))}: {e}")
            continue
        by_run.update({(r.job_id, r.submit): r for r in day if r.start or r.final})  # what can be billed
    by_job: dict[int, list[JobRecord]] = {}
    for rec in by_run.values():
        by_job.setdefault(rec.job_id, []).append(rec)
    reader = ledger.reader(config)
    if reader is not None:
        with reader:  # older holds still open, and jobs whose hooks failed: by id, whenever they ran
            home = commands.home_cluster(bin_dir)
            older = {row["job_id"] for row in reader.stale_holds(now, home)}
            older |= {row["job_id"] for row in reader.open_incidents(home) if row["job_id"]}
        if older - set(by_job):
            by_job.update(commands.job_runs(sorted(older - set(by_job)), bin_dir=bin_dir))
    settled: list[Settled] = []
    with ledger.writer(config) as lg:
        joined = lg.join(commands.home_cluster(bin_dir))
        for job_id in sorted(by_job):
            runs = sorted(by_job[job_id], key=lambda r: r.submit)
            # runs that started before this ledger kept the cluster's were billed elsewhere (its own books)
            runs = [
                r
                for r in runs
                if not r.start or r.start >= int(joined) or lg.run(ledger.run_key(r.cluster, r.job_id, r.submit))
            ]
            if not runs:  # a hold on a job sacct has no record of: nothing to settle it from
                continue
            fresh = {
                row["job_key"]
                for row in lg.held_runs(runs[0].cluster, job_id)
                if row["held_at"] > now - min_age_seconds
            }
            runs = [r for r in runs if ledger.run_key(r.cluster, r.job_id, r.submit) not in fresh]
            settled += settle_runs(lg, runs, config, "reconcile")
            if all(r.final and not r.tres for r in runs):  # never allocated (a cancelled pending job): its alert ends
                lg.resolve_incidents(runs[0].cluster, job_id)
            out += _hold_running(lg, runs, config)
    followups.after(settled)
    out += [
        {"key": done.key, "state": rec.state, "charge": done.charge, "refund": done.refund} for rec, _, done in settled
    ]
    followups.comments()  # those an earlier run could not write (slurmdbd was down)
    return Reconciled(out, unread)


def _hold_running(lg: ledger.Ledger, runs: list[JobRecord], config: Config) -> list[dict[str, object]]:
    """Hold the job's running GPU run if no prolog did (a failed prolog must not leave it free)."""
    out: list[dict[str, object]] = []
    for restart, rec in enumerate(runs):
        if rec.state != "RUNNING" or not rec.start or lg.run(ledger.run_key(rec.cluster, rec.job_id, rec.submit)):
            continue
        found = billable_run(lg, rec, rec.cluster, config, rec.start, restart)
        if found is not None and lg.hold(found[0], found[1], None, actor="reconcile")[0]:
            out.append({"key": found[0].key, "state": "RUNNING", "hold": found[1]})
    return out
