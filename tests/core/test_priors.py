"""The shipped priors (slurm_yolo/data/priors.json) against the corpus of real ultralytics CPU runs.

A site calibrates on a few run folders of its own (the site protocol: the 3 lowest-index small runs per
model, training time alone). Priors fitted on part of the corpus must carry it to what that part never
had, a family or a band of image sizes, better than the config's guesses do; the errors are the
corpus' measured training times, not the fit's.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from bench import accuracy, corpus
from bench import priors as bench_priors
from slurm_yolo.core import config
from slurm_yolo.core.model import fitting, priors
from slurm_yolo.core.model.timemodel import Sample, TimeModel, predict_train_seconds
from slurm_yolo.state import calibration

REF, DDP = 8.86, 0.9


@pytest.fixture(scope="module")
def loaded() -> list[tuple[dict[str, Any], Sample]]:
    return corpus.load()


def errors(tm: TimeModel, runs: list[Sample]) -> tuple[float, float]:
    """(MAPE, bias) of training time, computed here from the corpus' results.csv times."""
    e = [
        (predict_train_seconds(s.workload, tm, s.gpus, DDP, REF, s.cpus) - s.train_seconds) / s.train_seconds
        for s in runs
    ]
    return statistics.fmean(abs(x) for x in e), statistics.fmean(e)


def test_the_shipped_file_is_what_the_corpus_gives() -> None:
    assert bench_priors.text(bench_priors.corpus_priors()) == priors.PRIORS.read_text(), "python -m bench priors"


def test_the_default_config_uses_the_shipped_priors_and_config_turns_them_off() -> None:
    shipped = priors.shipped()
    cfg = config.load()
    tm = calibration.prior(cfg)
    assert tm.imgsz_exponent == shipped["terms"]["imgsz_exponent"] and tm.spreads == shipped["spreads"]
    assert (tm.k, tm.startup_seconds) == (1.0, 20.0)  # a site's speed and its jobs' start-up: the config's
    cfg.estimate = replace(cfg.estimate, priors="config")
    tm = calibration.prior(cfg)
    assert (tm.imgsz_exponent, tm.overhead_seconds, tm.spreads) == (0.3, 5.0, {})


@pytest.mark.parametrize(
    "what, held_out",
    [
        ("family yolov8", lambda s: s.workload.family == "yolov8"),
        ("family yolo11", lambda s: s.workload.family == "yolo11"),
        ("family yolo26", lambda s: s.workload.family == "yolo26"),
        ("imgsz 352-640", lambda s: s.workload.imgsz > 320),
    ],
)
def test_priors_fitted_without_a_family_or_an_imgsz_band_predict_it_better_than_the_config(
    loaded: list[tuple[dict[str, Any], Sample]],
    what: str,
    held_out: Callable[[Sample], bool],
) -> None:
    base = bench_priors.config_prior()
    part = bench_priors.fit_priors([s for _, s in loaded if not held_out(s)], base, f"without {what}", draws=3)
    cal, rest, ext = accuracy.site_split(loaded)
    target = [s for s in rest + ext if held_out(s)]
    assert len(target) >= 30
    mape, bias = errors(fitting.fit_terms(cal, priors.apply(base, part), DDP, REF), target)
    guess_mape, guess_bias = errors(fitting.fit_terms(cal, base, DDP, REF), target)
    print(
        f"{what}: {len(target)} runs; held-out priors MAPE {mape:.1%} bias {bias:+.1%};"
        f" config priors MAPE {guess_mape:.1%} bias {guess_bias:+.1%}"
    )
    assert mape < guess_mape and abs(bias) < abs(guess_bias) + 0.01
    assert mape <= 0.12 and abs(bias) <= 0.09


def test_a_gpu_like_site_moves_the_batch_exponent_the_corpus_measured_on_cpus(
    loaded: list[tuple[dict[str, Any], Sample]],
) -> None:
    """A GPU fills better with a bigger batch (exponent < 0) where a CPU spills its caches (> 0): the
    shipped prior keeps that term's spread wide, so a site whose 24 run folders say -0.2 (times made
    here from the shipped model with that exponent and its own k) moves it there and predicts the
    rest of its runs well."""
    from dataclasses import replace

    shipped = calibration.prior(config.load())
    truth = replace(shipped, batch_exponent=-0.2, k=0.3)
    cal, rest, ext = accuracy.site_split(loaded)

    def site(runs: list[Sample]) -> list[Sample]:
        return [
            s._replace(train_seconds=predict_train_seconds(s.workload, truth, s.gpus, DDP, REF, s.cpus)) for s in runs
        ]

    tm = fitting.fit_terms(site(cal), shipped, DDP, REF)
    assert tm.batch_exponent < -0.1
    assert errors(tm, site(rest + ext))[0] < 0.05
