"""Hostile summaries (a job's Comment, from usage records it wrote itself) against the real calibration store: what one job and one user can move.

Expected values are the bound's numbers written out (one job: x1.1 or /1.1; one user per admin save:
the same; every user together per admin save: x1.15 or /1.15), not the feedback module's formulas.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import reference_workloads

from slurm_yolo.controller import feedback
from slurm_yolo.core import config as config_mod
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate, priors, timemodel
from slurm_yolo.parse import beacon
from slurm_yolo.state import calibration

PART = "t4"
# The shipped corpus prior's fixed cost inside training (the config's k and start-up: 1.0 and 20 s)
OVERHEAD = json.loads(priors.PRIORS.read_text())["terms"]["overhead_seconds"]


def forged(folder: Path, job: int, seconds: float, imgsz: int = 320, images: int = 200) -> beacon.Beacon | None:
    """The summary a job posts in its Comment for a well-formed usage file it wrote itself: yolov8n,
    5 epochs at ``imgsz`` px of ``images`` images, claiming ``seconds`` of training in its one epoch;
    as the controller reads it."""
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    w = estimate.workload(spec.parse(["train", "data=d.yaml", "epochs=5", f"imgsz={imgsz}"]), images, images // 4, m)
    path = folder / f"yolo-usage-{job}.jsonl"
    recs = [
        {"kind": "start", "gpus": 1, "workload": w.to_dict()},
        {"kind": "epoch", "epoch": 1, "epochs": 5, "images": images, "tokens": images * imgsz**2, "seconds": seconds},
    ]
    path.write_text("\n".join(map(json.dumps, recs)))
    posted = beacon.from_records(path, 1_700_000_000)
    return beacon.decode(beacon.summary_text(beacon.with_beacon("yolo:eff=1", posted))) if posted else None


def feed(
    cfg: config_mod.Config,
    folder: Path,
    job: int,
    seconds: float,
    elapsed: int | None,
    uid: int | None = None,
    **workload: int,
) -> feedback.Feedback | None:
    owner = os.getuid() if uid is None else uid
    return feedback.job_feedback(cfg, PART, job, forged(folder, job, seconds, **workload), "c", owner, elapsed)


def model(cfg: config_mod.Config) -> calibration.TimeModel:
    return calibration.load(cfg, PART).model


def predictions(cfg: config_mod.Config) -> list[float]:
    """The partition's predictions of the reference workloads (conftest's)."""
    tm, ref = model(cfg), cfg.estimate.reference_gflops
    return [timemodel.predict_seconds(w, tm, 1, 0.9, ref) for w in reference_workloads()]


def test_a_record_claiming_no_training_on_a_new_partition_moves_k_by_one_step(tmp_path: Path) -> None:
    cfg = config_mod.load()
    before = model(cfg)
    assert before.n == 0 and (before.k, before.overhead_seconds, before.startup_seconds) == (1.0, OVERHEAD, 20.0)
    fb = feed(cfg, tmp_path, 1, 1e-6, elapsed=4)  # the 4-second job of the review, asking k x2.4e-08
    assert fb is not None and fb.applied and "limited" in fb.reason and "recalibrate" in fb.reason
    after = model(cfg)
    assert after.k == pytest.approx(1.0 / 1.1, rel=1e-12)
    assert after.overhead_seconds == pytest.approx(OVERHEAD / 1.1, rel=1e-12)  # fixed costs dominate: moved with k
    assert after.startup_seconds == pytest.approx(20.0 / 1.1, rel=1e-12)  # elapsed 4 s asks less than 18 s
    assert after.n == 0  # the runs behind the fit: only an admin's fit moves it
    with calibration.Store(cfg) as store:
        (sample,) = store.samples(PART)  # the run is kept for the refit, and what it asked is pending
        (move,) = store.conn.execute("SELECT * FROM moves").fetchall()
    assert sample.train_seconds == 1e-6
    assert move["uid"] == os.getuid() and move["k_asked"] < 1e-3 and move["k_applied"] == pytest.approx(1 / 1.1)


def test_a_record_claiming_long_training_moves_k_up_by_one_step(tmp_path: Path) -> None:
    cfg = config_mod.load()
    fb = feed(cfg, tmp_path, 1, 100_000.0, elapsed=200_000)  # a job that really ran that long
    assert fb is not None and fb.applied
    after = model(cfg)
    assert after.k == pytest.approx(1.1, rel=1e-12)  # compute dominates: k alone moves
    assert after.overhead_seconds == OVERHEAD
    assert after.startup_seconds == pytest.approx(22.0, rel=1e-12)  # asked ~100,000 s


def test_fifty_forged_jobs_of_one_user_move_k_no_further_than_one_users_bound(tmp_path: Path) -> None:
    cfg = config_mod.load()
    for job in range(1, 51):
        feed(cfg, tmp_path, job, 1e-6, elapsed=4)
    assert model(cfg).k == pytest.approx(1.0 / 1.1, rel=1e-12)
    assert model(cfg).startup_seconds == pytest.approx(20.0 / 1.1, rel=1e-12)
    assert len(calibration.history(cfg, PART)) == 1  # the first job moved k; 49 waited for recalibrate
    with calibration.Store(cfg) as store:
        assert len(store.samples(PART)) == 50
        assert store.moved_by(PART, os.getuid()) == pytest.approx((1 / 1.1, 1 / 1.1, 1 / 1.1))
    fb = feed(cfg, tmp_path, 51, 100_000.0, elapsed=200_000)  # the same user may undo their move
    assert fb is not None and fb.applied and model(cfg).k == pytest.approx(1.0, rel=1e-12)


def test_thirty_alternating_forged_pairs_move_no_prediction_beyond_one_users_bound(tmp_path: Path) -> None:
    """A hostile review's attack: a compute-heavy summary claiming a fast run moves k down, then a
    fixed-cost-heavy one claiming a slow run moves every term up; k's net move is 1, so a budget on k
    alone never filled while the fixed terms grew x1.1 a pair (30 pairs: a coco8 run's limit x3)."""
    cfg = config_mod.load()
    before = predictions(cfg)
    for pair in range(30):
        feed(cfg, tmp_path, 2 * pair + 1, 10.0, elapsed=100)  # predicted ~22 s: k down
        feed(cfg, tmp_path, 2 * pair + 2, 5.0, elapsed=100, imgsz=32, images=8)  # predicted ~0.5 s: all up
    after = predictions(cfg)
    assert model(cfg).overhead_seconds == pytest.approx(OVERHEAD * 1.1, rel=1e-9)  # the attack used the bound
    for b, a in zip(before, after, strict=True):
        assert 1 / 1.1 - 1e-9 <= a / b <= 1.1 + 1e-9, (b, a)


def test_an_admin_save_opens_a_new_window_for_each_user(tmp_path: Path) -> None:
    cfg = config_mod.load()
    feed(cfg, tmp_path, 1, 1e-6, elapsed=4)
    with calibration.Store(cfg) as store:
        store.save(PART, model(cfg), "recalibrate")  # what an admin's refit does, whatever it fitted
    feed(cfg, tmp_path, 2, 1e-6, elapsed=4)
    feed(cfg, tmp_path, 3, 1e-6, elapsed=4)
    assert model(cfg).k == pytest.approx(1.0 / 1.1**2, rel=1e-12)


def test_each_user_has_their_own_bound_within_the_partitions(tmp_path: Path) -> None:
    """Two users' steps would make x1.21: the second user's stops at the partition's x1.15, and a
    third user's moves nothing further that way (feedback.PARTITION_STEP)."""
    cfg = config_mod.load()
    for job, uid in ((1, 4001), (2, 4001), (3, 4002), (4, 4002), (5, 4003)):
        feed(cfg, tmp_path, job, 1e-6, elapsed=4, uid=uid)
    assert model(cfg).k == pytest.approx(1.0 / 1.15, rel=1e-12)
    with calibration.Store(cfg) as store:
        assert store.moved_by(PART, 4001)[0] == pytest.approx(1 / 1.1)
        assert store.moved_by(PART, 4002)[0] == pytest.approx(1.1 / 1.15)
        assert store.moved_by(PART, 4003) == pytest.approx((1.0, 1.0, 1.0))
        assert store.moved_by(PART, None) == pytest.approx((1 / 1.15, 1 / 1.15, 1 / 1.15))
    fb = feed(cfg, tmp_path, 6, 100_000.0, elapsed=200_000, uid=4003)  # the third user may move it back
    assert fb is not None and fb.applied and model(cfg).k == pytest.approx(1.1 / 1.15, rel=1e-12)


def test_three_colluding_users_move_no_reference_prediction_beyond_the_partitions_bound(tmp_path: Path) -> None:
    """The issue's finding: two colluding users moved a100's reference prediction x1.21, and N users
    would move it x1.1^N. Three users each send forged summaries, alternating k down and every term up
    (the one-user attack above) and then all slow: no reference prediction moves beyond x1.15 either
    way in the window, the bound the partition states (docs/time-model.md)."""
    cfg = config_mod.load()
    before = predictions(cfg)
    job = 0
    for uid in (4001, 4002, 4003):
        for _ in range(6):
            job += 2
            feed(cfg, tmp_path, job, 10.0, elapsed=100, uid=uid)  # k down
            feed(cfg, tmp_path, job + 1, 5.0, elapsed=100, uid=uid, imgsz=32, images=8)  # all up
        for _ in range(3):
            job += 2
            feed(cfg, tmp_path, job, 100_000.0, elapsed=200_000, uid=uid)  # k up
    after = predictions(cfg)
    assert model(cfg).overhead_seconds == pytest.approx(OVERHEAD * 1.15, rel=1e-9)  # the attack met the bound
    assert model(cfg).k == pytest.approx(1.15, rel=1e-9)
    for b, a in zip(before, after, strict=True):
        assert 1 / 1.15 - 1e-9 <= a / b <= 1.15 + 1e-9, (before, after)
    with calibration.Store(cfg) as store, store.transaction():
        store.save(PART, model(cfg), "recalibrate")  # an admin's save: a new window, for everyone
    feed(cfg, tmp_path, job + 2, 100_000.0, elapsed=200_000, uid=4001)
    assert model(cfg).k == pytest.approx(1.15 * 1.1, rel=1e-9)


def test_training_beyond_slurms_elapsed_is_capped(tmp_path: Path) -> None:
    s = feedback.sample_from_beacon(forged(tmp_path, 1, 5000.0), "k", elapsed=100)
    assert s is not None and s.train_seconds == 100.0
    assert s.total_seconds is None  # records that disagree with Slurm teach no start-up
    cfg = config_mod.load()
    feed(cfg, tmp_path, 2, 5000.0, elapsed=100)
    with calibration.Store(cfg) as store:
        (stored,) = store.samples(PART)
    assert stored.train_seconds == 100.0 and stored.total_seconds is None


@pytest.mark.parametrize("elapsed", [None, 0])
def test_without_slurms_elapsed_nothing_moves(tmp_path: Path, elapsed: int | None) -> None:
    cfg = config_mod.load()
    fb = feed(cfg, tmp_path, 1, 1e-6, elapsed=elapsed)
    assert fb is not None and not fb.applied and fb.k_after == fb.k_before == 1.0
    assert "no elapsed time from Slurm" in fb.reason
    assert model(cfg).k == 1.0 and calibration.history(cfg, PART) == []
    with calibration.Store(cfg) as store:
        assert store.samples(PART) == []


def test_without_a_uid_nothing_moves(tmp_path: Path) -> None:
    cfg = config_mod.load()
    fb = feedback.job_feedback(cfg, PART, 1, forged(tmp_path, 1, 1e-6), "c", None, 4)
    assert fb is not None and not fb.applied and "no job uid" in fb.reason and model(cfg).k == 1.0


@pytest.mark.parametrize("seconds", [float("nan"), float("inf")])
def test_a_record_of_nan_or_infinite_seconds_is_no_sample(tmp_path: Path, seconds: float) -> None:
    """json.dumps writes NaN and Infinity, and Python reads them back: such a record is not a sample
    (it would make k NaN), and nothing is recorded."""
    cfg = config_mod.load()
    assert feed(cfg, tmp_path, 1, seconds, elapsed=4) is None
    assert model(cfg).n == 0 and model(cfg).k == 1.0
    with calibration.Store(cfg) as store:
        assert store.samples(PART) == []


def test_forged_jobs_never_make_a_partition_look_calibrated(tmp_path: Path) -> None:
    """A hostile helper's finding: each job that moved k added one to ``n``, the runs behind the
    model, which halves an uncalibrated partition's doubled limit at 1 and refuses honest runs as
    outliers from 5. Eight jobs alternating fast and slow claims leave n at 0 and the limit doubled."""
    cfg = config_mod.load()
    for job in range(1, 9):
        feed(cfg, tmp_path, job, 1e-6 if job % 2 else 5000.0, elapsed=5000)
    after = model(cfg)
    assert after.n == 0 and timemodel.buffer_for(after, 0.2, 600.0).value == 1.0
    assert 1 / 1.1 - 1e-9 <= after.k <= 1.1 + 1e-9


def test_a_summary_of_counts_that_cannot_be_is_no_sample(tmp_path: Path) -> None:
    """No FLOPs (a ZeroDivisionError in the feedback once), no images, more epochs done than planned."""
    good = forged(tmp_path, 1, 10.0)
    assert good is not None and good.workload is not None
    for change in ({"gflops": 0.0}, {"train_images": 0}, {"batch": 0}, {"epochs": 0}):
        bad = replace(good, workload=replace(good.workload, **change))
        assert feedback.sample_from_beacon(bad, "k", elapsed=100) is None, change
    assert feedback.sample_from_beacon(replace(good, epochs_done=6), "k", elapsed=100) is None


def test_the_gpus_claimed_are_at_most_those_slurm_allocated(tmp_path: Path) -> None:
    good = forged(tmp_path, 1, 10.0)
    assert good is not None
    s = feedback.sample_from_beacon(replace(good, gpus=1000), "k", elapsed=100, gpus=1)
    assert s is not None and s.gpus == 1


def test_an_admins_refit_weighs_one_users_forged_summaries_as_five_runs(tmp_path: Path) -> None:
    """The README follower's finding: after 240 forged summaries of one user, the README's calibrate
    refit t4 from every stored sample and k fell 0.75 -> 9.5e-05. Ten honest runs of five users, then
    one user's 200 summaries claiming a hundredth of their time: her runs weigh as the median user's
    two, and the refit's predictions of the reference workloads stay within 10% of the honest runs'
    alone (every run weighing alike, they fell to a hundredth)."""
    cfg = config_mod.load()
    ref = cfg.estimate.reference_gflops
    prior = model(cfg)
    kinds = (
        ("yolov8n", 5, 320, 200),
        ("yolov8s", 3, 640, 500),
        ("yolov8n", 10, 64, 40),
        ("yolov8s", 2, 320, 2000),
        ("yolov8n", 20, 128, 100),
    )
    runs = []
    for name, epochs, imgsz, images in kinds:
        m = estimate.lookup_model(name)
        assert m is not None
        words = ["train", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}"]
        runs.append(estimate.workload(spec.parse(words), images, max(1, images // 4), m))

    def honest(i: int, w: timemodel.Workload) -> timemodel.Sample:
        return timemodel.Sample(w, 1, timemodel.predict_train_seconds(w, prior, 1, 0.9, ref), key=f"job:c:{i}")

    def refit_predictions(extra: int) -> list[float]:
        with calibration.Store(cfg) as store:
            store.conn.execute("DELETE FROM samples")
            for i in range(10):
                store.add_sample(PART, honest(i, runs[i % 5]), "job", uid=4000 + i // 2)
            for i in range(extra):
                s = honest(100 + i, runs[i % 5])
                store.add_sample(PART, s._replace(train_seconds=s.train_seconds / 100), "job", uid=4999)
            tm = calibration.refit(store, PART, "recalibrate")
        return [timemodel.predict_seconds(w, tm, 1, 0.9, ref) for w in reference_workloads()]

    alone, forged = refit_predictions(0), refit_predictions(200)
    for a, f in zip(alone, forged, strict=True):
        assert 1 / 1.1 <= f / a <= 1.1, (alone, forged)
