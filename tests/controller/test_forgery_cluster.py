"""One user's forged summaries against the time model, on the real bundled clusters (Slurm 22.05 and
24.11), as a hostile review attacked it.

alice's jobs post, in turn, the summary of a compute-heavy run that claims it trained fast (k down)
and of a tiny run that claims it trained slowly (every term up). While the budget counted k alone,
k's net move was 1 and the fixed terms grew x1.1 a pair: 30 pairs tripled a coco8 run's limit. Here
30 pairs are settled by the clusters' own epilogs, from the Comments the jobs wrote, and no prediction
of the reference workloads has moved beyond one user's bound (x1.1 either way) since the window the
test opened with an admin's save. The window starts from the cluster's own t4 model with no runs
behind it (so that no summary is refused as an outlier: the attack meets the bound, not the outlier
rule), and that model is put back afterwards, and the forged runs taken out of the samples an admin's refit reads.
"""

from __future__ import annotations

import pwd
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import Slurm, poll, reference_workloads, run_reporting, sample_of

from slurm_yolo.core.model import timemodel
from slurm_yolo.state import calibration

pytestmark = pytest.mark.cluster
PAIRS = 30
BOUND = 1.1  # one user's move per window, either way (feedback.USER_STEP), written out


def sample_keys(slurm: Slurm, jobs: list[int]) -> list[str]:
    """The calibration samples' keys of these jobs (``sample_of``'s)."""
    return [f"job:{slurm.name}:{j}" for j in jobs]


def predictions(slurm: Slurm) -> list[float]:
    cfg = slurm.config()
    tm = calibration.load(cfg, "t4").model
    ref = cfg.estimate.reference_gflops
    return [timemodel.predict_seconds(w, tm, 1, 0.9, ref) for w in reference_workloads()]


def restore(slurm: Slurm, jobs: list[int], kept: timemodel.TimeModel, whose: str) -> None:
    """t4's model back, and the forged runs out of the samples an admin's refit would read."""
    with calibration.Store(slurm.config()) as store, store.transaction():
        keys = sample_keys(slurm, jobs)
        for table in ("samples", "moves"):
            store.conn.execute(f"DELETE FROM {table} WHERE key IN ({','.join('?' * len(keys))})", keys)
        store.save("t4", kept, f"test: t4's model back after {whose} forged summaries")


def test_thirty_alternating_forged_pairs_move_no_prediction_beyond_one_users_bound(priced: Slurm, work: Path) -> None:
    cfg = priced.config()
    kept = calibration.load(cfg, "t4").model
    start = replace(kept, n=0)
    jobs: list[int] = []
    with calibration.Store(cfg) as store:
        store.save("t4", start, "test: a window of its own for alice's forged summaries")
    try:
        before = predictions(priced)
        for _ in range(PAIRS):
            # 5 epochs of 200 images at 320 px in 0.5 s (predicted a minute or more): k down; then one
            # epoch of 8 at 32 px in 1 s (predicted a few tenths, fixed costs): every term up
            jobs.append(run_reporting(priced, work, [0.1] * 5, sleep=1, imgsz=320, images=200))
            jobs.append(run_reporting(priced, work, [1.0], sleep=1, imgsz=32, images=8))
        for job in jobs:
            assert priced.ended(job, timeout=600)[0]["State"] == "COMPLETED"
        poll("every forged job's sample", lambda: all(sample_of(priced, j) for j in jobs), timeout=120)
        after = predictions(priced)
        with calibration.Store(cfg) as store:
            moved = store.moved_by("t4", pwd.getpwnam("alice").pw_uid)
            keys = sample_keys(priced, jobs)
            applied = store.conn.execute(
                f"SELECT k_applied, fixed_applied FROM moves WHERE key IN ({','.join('?' * len(keys))})", keys
            ).fetchall()
        assert len(applied) == 2 * PAIRS
        assert min(r[0] for r in applied) < 1.0 < max(r[1] for r in applied)  # it alternated: k down, fixed costs up
        for b, a in zip(before, after, strict=True):
            assert 1 / BOUND - 1e-9 <= a / b <= BOUND + 1e-9, (before, after, moved)
    finally:
        restore(priced, jobs, kept, "alice's")


PARTITION_BOUND = 1.15  # every user's moves per window, either way (feedback.PARTITION_STEP), written out


def test_three_users_forged_summaries_move_no_prediction_beyond_the_partitions_bound(priced: Slurm, work: Path) -> None:
    """The issue's finding: colluding users moved a partition x1.1 each (two: x1.21). alice, bob and
    root each run two jobs whose summaries claim a fast run (k down), settled by the clusters' own
    epilogs: alice's first moves k /1.1, bob's first only to /1.15 (the partition's bound), and no
    other job moves it further; no reference prediction moves beyond x1.15."""
    cfg = priced.config()
    kept = calibration.load(cfg, "t4").model
    jobs: list[int] = []
    with calibration.Store(cfg) as store:
        store.save("t4", replace(kept, n=0), "test: a window of its own for three users' forged summaries")
    try:
        before = predictions(priced)
        for user in ("alice", "bob", "root"):
            for _ in range(2):
                jobs.append(run_reporting(priced, work, [0.1] * 5, sleep=1, imgsz=320, images=200, user=user))
        for job in jobs:
            assert priced.ended(job, timeout=300)[0]["State"] == "COMPLETED"
        poll("every forged job's sample", lambda: all(sample_of(priced, j) for j in jobs), timeout=120)
        after = predictions(priced)
        assert calibration.load(cfg, "t4").model.k == pytest.approx(kept.k / PARTITION_BOUND, rel=1e-9)
        for b, a in zip(before, after, strict=True):
            assert 1 / PARTITION_BOUND - 1e-9 <= a / b <= PARTITION_BOUND + 1e-9, (before, after)
    finally:
        restore(priced, jobs, kept, "three users'")
