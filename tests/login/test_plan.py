"""The plan: limits, GRES, QOS, GPUs for a deadline, partition auto."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_yolo.core import config as config_mod
from slurm_yolo.core import durations, spec
from slurm_yolo.core.errors import SlurmError, UsageError
from slurm_yolo.core.model import estimate
from slurm_yolo.core.model.timemodel import TimeModel
from slurm_yolo.login import plan
from slurm_yolo.slurm.parsers import WillRun

TM = TimeModel(
    k=2.0,
    overhead_seconds=5.0,
    val_weight=0.5,
    iteration_seconds=0.01,
    startup_seconds=20.0,
    n=40,
    coverage=0.99,
    coverage_z=math.log(1.05),
    noise_relative=1.0,
)


@pytest.fixture
def cfg(site_config: Path) -> config_mod.Config:
    return config_mod.load()


def wl(
    model: str = "yolov8n", epochs: int = 10, imgsz: int = 640, batch: int = 16, train: int = 1000
) -> estimate.Workload:
    m = estimate.lookup_model(model)
    assert m is not None
    s = spec.parse(["train", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}", f"batch={batch}"])
    return estimate.workload(s, train, 100, m)


def test_time_limit_whole_minutes_with_buffer() -> None:
    assert plan.time_limit(100, 0.2) == 120
    assert plan.time_limit(600, 0.2) == 720
    assert plan.time_limit(601, 0.2) == 780
    assert plan.time_limit(1, 0.2) == 60


def test_light_job_gets_shards_heavy_job_whole_gpus(cfg: config_mod.Config) -> None:
    light = plan.plan_partition(wl(), TM, "test", cfg.partition("a100"), plan.Request("a100"), cfg)
    assert light.shard and light.gres == "shard:a100:2"
    heavy = plan.plan_partition(wl("yolov8l"), TM, "test", cfg.partition("t4"), plan.Request("t4"), cfg)
    assert not heavy.shard and heavy.gres == "gpu:t4:1"
    two = plan.plan_partition(wl(), TM, "test", cfg.partition("a100"), plan.Request("a100", gpus=2), cfg)
    assert two.gres == "gpu:a100:2" and two.predicted_seconds < light.predicted_seconds


def test_qos_short_jobs_and_priorities(cfg: config_mod.Config) -> None:
    short = plan.plan_partition(
        wl(epochs=1), TM, "t", cfg.partition("a100"), plan.Request("a100", priority="prod"), cfg
    )
    assert short.qos == "yolo-short"
    explore = plan.plan_partition(
        wl(epochs=1), TM, "t", cfg.partition("a100"), plan.Request("a100", priority="explore"), cfg
    )
    assert explore.qos == "yolo-explore"
    long = plan.plan_partition(
        wl(epochs=300), TM, "t", cfg.partition("a100"), plan.Request("a100", priority="prod"), cfg
    )
    assert long.time_limit_seconds > 3600 and long.qos == "yolo-prod"


def test_deadline_picks_fewest_gpus(cfg: config_mod.Config) -> None:
    w = wl("yolov8l", epochs=20)
    one = plan.plan_partition(w, TM, "t", cfg.partition("a100"), plan.Request("a100"), cfg)
    p = plan.plan_partition(
        w, TM, "t", cfg.partition("a100"), plan.Request("a100", deadline_seconds=one.predicted_seconds * 0.7), cfg
    )
    assert p.gpus == 2
    p = plan.plan_partition(
        w, TM, "t", cfg.partition("a100"), plan.Request("a100", deadline_seconds=one.predicted_seconds * 1.1), cfg
    )
    assert p.gpus == 1
    with pytest.raises(
        UsageError,
        match=r"^--deadline 30 s cannot be met on a100: needs \d+ min even with 2 GPUs; give a longer one, or fewer epochs or images$",
    ):
        plan.plan_partition(w, TM, "t", cfg.partition("a100"), plan.Request("a100", deadline_seconds=30), cfg)
    with pytest.raises(
        UsageError,
        match=r"^--deadline 1 s is shorter than the job's start-up alone on a100 \(20 s\): give a longer one$",
    ):
        plan.plan_partition(w, TM, "t", cfg.partition("a100"), plan.Request("a100", deadline_seconds=1), cfg)


def test_seconds_text() -> None:
    assert [durations.seconds_text(s) for s in (0.4, 1, 45, 59.4, 59.6, 90, 3600)] == [
        "0 s",
        "1 s",
        "45 s",
        "59 s",
        "1 min",
        "2 min",
        "60 min",
    ]


def test_too_many_gpus_for_the_partition(cfg: config_mod.Config) -> None:
    with pytest.raises(UsageError, match="has 2 GPUs per node"):
        plan.plan_partition(wl(), TM, "t", cfg.partition("a100"), plan.Request("a100", gpus=3), cfg)
    with pytest.raises(
        UsageError,
        match=r"^device= names 3 GPUs: partition a100 has 2 GPUs per node: name at most 2, or another partition \(-p auto chooses\)$",
    ):
        plan.plan_partition(wl(), TM, "t", cfg.partition("a100"), plan.Request("a100"), cfg, devices=3)
    assert plan.plan_partition(wl(), TM, "t", cfg.partition("a100"), plan.Request("a100"), cfg, devices=2).gpus == 2


NOW = 1_796_000_000


def test_auto_picks_the_earliest_finish(cfg: config_mod.Config) -> None:
    """Slurm's expected start (sbatch --test-only) + the predicted run time, earliest first."""
    w = wl("yolov8l", epochs=1)  # 4.7 h on t4, 2.4 h on a100 (faster k)
    a = plan.plan_partition(w, replace(TM, k=1.0), "t", cfg.partition("a100"), plan.Request("auto"), cfg)
    t = plan.plan_partition(w, TM, "t", cfg.partition("t4"), plan.Request("auto"), cfg)
    best = plan.choose([a, t], [WillRun(NOW + 36000), WillRun(NOW + 60)], NOW)  # a100 busy for 10 h
    assert best.partition == "t4" and best.expected_start == NOW + 60
    assert best.explain[-3:] == [
        (
            f"partition auto: t4 would start {plan.clock(NOW + 60)} + {t.predicted_seconds / 60:.1f} min predicted"
            f" -> finish {plan.clock(NOW + 60 + t.predicted_seconds)}"
        ),
        "partition auto: t4 finishes first",
        f"expected start: {plan.clock(NOW + 60)} on t4, in 1.0 min (Slurm's scheduler)",
    ]
    assert t.expected_start is None and "finishes first" not in " ".join(t.explain)  # the plans given are kept
    soon = plan.choose([a, t], [WillRun(NOW + 3600), WillRun(NOW)], NOW)  # an hour's wait on a100 still wins
    assert soon.partition == "a100" and soon.expected_start == NOW + 3600


def test_auto_can_prefer_the_smallest_hold(cfg: config_mod.Config) -> None:
    """``--prefer cheapest``: the partition whose hold is smallest among those Slurm would start, the
    earliest finish among equal holds; each partition's hold is in --explain."""
    w = wl("yolov8l", epochs=1)
    a = plan.plan_partition(w, replace(TM, k=1.0), "t", cfg.partition("a100"), plan.Request("auto"), cfg)
    t = plan.plan_partition(w, TM, "t", cfg.partition("t4"), plan.Request("auto"), cfg)
    answers = [WillRun(NOW + 36000), WillRun(NOW + 60)]  # a100 busy for 10 h: t4 finishes first
    cheap = plan.choose([a, t], answers, NOW, [5_000, 9_000], "cheapest")
    assert cheap.partition == "a100" and cheap.explain[-2] == "partition auto: a100 is the cheapest"
    assert f"-> finish {plan.clock(NOW + 36000 + a.predicted_seconds)}, holds 5.0 kTok" in cheap.explain[-4]
    assert plan.choose([a, t], answers, NOW, [5_000, 9_000]).partition == "t4"  # soonest, the default
    assert plan.choose([a, t], answers, NOW, [7_000, 7_000], "cheapest").partition == "t4"  # equal: the finish decides
    refused = [WillRun(None, "sbatch failed: no GPUs"), WillRun(NOW + 60)]
    assert plan.choose([a, t], refused, NOW, [1, 9_000], "cheapest").partition == "t4"  # never one Slurm refuses


def test_auto_skips_refused_partitions(cfg: config_mod.Config) -> None:
    a = plan.plan_partition(wl(), TM, "t", cfg.partition("a100"), plan.Request("auto"), cfg)
    t = plan.plan_partition(wl(), TM, "t", cfg.partition("t4"), plan.Request("auto"), cfg)
    best = plan.choose([a, t], [WillRun(None, "sbatch failed: no GPUs"), WillRun(NOW + 7200)], NOW)
    assert best.partition == "t4" and "partition auto: a100 refused by Slurm: sbatch failed: no GPUs" in best.explain
    with pytest.raises(SlurmError) as e:
        plan.choose([a, t], [WillRun(None, "sbatch failed: x"), WillRun(None, "sbatch failed: y")], NOW)
    assert (
        str(e.value)
        == "--partition auto: Slurm refuses the job on every partition (a100: sbatch failed: x; t4: sbatch failed: y)"
    )


def test_a_limit_past_a_year_is_one_error() -> None:
    cfg = config_mod.load(Path("/nonexistent"))
    slow = replace(TM, k=1e6)
    with pytest.raises(UsageError, match=r"more than a year"):
        plan.plan_partition(wl(), slow, "t", cfg.partition("a100"), plan.Request("a100"), cfg)


def test_a_short_job_says_its_qos_replaced_the_tier_asked_for(cfg: config_mod.Config) -> None:
    """``--priority prod`` on a job of at most qos.short_max_minutes runs in the short QOS: --explain
    says so, and whose QOS and tier rate it gets instead (it used to say only "short job")."""
    short = wl(epochs=1, imgsz=64, train=16)
    p = plan.plan_partition(short, TM, "t", cfg.partition("t4"), plan.Request("t4", priority="prod"), cfg)
    assert p.time_limit_seconds <= 60 * 60 and p.qos == "yolo-short"
    assert (
        "qos: yolo-short (a short job, limit at most 60 min: yolo-short's priority and tier rate instead of"
        " priority prod's yolo-prod)"
    ) in p.explain


def test_her_own_limit_is_the_jobs_with_what_it_covers_by_the_measured_errors(cfg: config_mod.Config) -> None:
    """-t/--time: her limit (whole minutes), not the plan's; the plan still predicts, and says what her
    limit covers by the model's cross-validated errors (scores: conformal, of n + 1)."""
    scores = sorted([-0.8, -0.4, 0.0, 0.2, 0.5, 0.9, 1.5, 2.5, 3.0])  # nine runs, in noise units
    tm = replace(TM, n=9, noise_relative=0.1, scores=scores)
    base = plan.plan_partition(wl(epochs=50), tm, "t", cfg.partition("t4"), plan.Request("t4"), cfg)
    ratio = math.exp(0.1 * 0.6)  # at least the five scores <= 0.6 of nine
    own = plan.plan_partition(
        wl(epochs=50),
        tm,
        "t",
        cfg.partition("t4"),
        plan.Request("t4", time_limit_seconds=base.predicted_seconds * ratio),
        cfg,
    )
    assert own.predicted_seconds == base.predicted_seconds
    assert own.time_limit_seconds == math.ceil(base.predicted_seconds * ratio / 60) * 60
    assert own.coverage is None  # hers: the plan promises nothing of it
    said = [line for line in own.explain if line.startswith("time limit: your limit ")]  # never "buffer: 12.79"
    assert len(said) == 1 and "cross-validated runs" in said[0], own.explain
    assert not any(line.startswith("buffer: ") for line in own.explain)
    assert own.short_limit == ""
    hour = plan.plan_partition(
        wl(epochs=50), tm, "t", cfg.partition("t4"), plan.Request("t4", time_limit_seconds=3600), cfg
    )
    assert hour.time_limit_seconds == 3600 and hour.qos == "yolo-short"  # the tier follows her limit


def test_a_limit_under_the_prediction_is_a_warning_not_a_refusal(cfg: config_mod.Config) -> None:
    p = plan.plan_partition(
        wl(epochs=300), TM, "t", cfg.partition("t4"), plan.Request("t4", time_limit_seconds=90), cfg
    )
    assert p.time_limit_seconds == 120 and p.predicted_seconds > 120
    assert p.short_limit.startswith("your limit 2 min is under the predicted")
    assert "gets no USR2" in p.short_limit and "requeues at the USR2" not in p.short_limit  # none under 3 min
    longer = plan.plan_partition(
        wl(epochs=300), TM, "t", cfg.partition("t4"), plan.Request("t4", time_limit_seconds=300), cfg
    )
    assert "checkpoints and requeues at the USR2" in longer.short_limit
    with pytest.raises(UsageError, match=r"--time .*more than a year"):
        plan.plan_partition(wl(), TM, "t", cfg.partition("t4"), plan.Request("t4", time_limit_seconds=400 * 86400), cfg)


def test_what_a_limit_covers_is_the_share_of_measured_errors_under_it() -> None:
    """Conformal: a limit whose score (log(limit / prediction) / noise) passes k of n scores covers
    k / (n + 1); none without cross-validated runs."""
    tm = replace(TM, n=9, noise_relative=0.1, scores=[-0.8, -0.4, 0.0, 0.2, 0.5, 0.9, 1.5, 2.5, 3.0])
    assert tm.covers(math.exp(0.1 * 0.6), 1000) == pytest.approx(5 / 10)
    assert tm.covers(math.exp(0.1 * 3.0), 1000) == pytest.approx(9 / 10)
    assert tm.covers(math.exp(0.1 * 0.6 * 2), 1000, widening=2) == pytest.approx(5 / 10)
    assert replace(tm, scores=[]).covers(2.0, 1000) is None
