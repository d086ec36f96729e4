"""``python -m bench priors [--check]``: fit the shipped priors on the corpus, write ``slurm_yolo/data/priors.json``.

Every corpus run is fitted at once (training time and whole-job wall) from the config's priors with
their wide spreads; each term's spread is twice its spread over ``DRAWS`` bootstrap refits (runs drawn
with replacement, a fixed seed: the file is reproducible), at least ``priors.MIN_SPREAD`` for the
shape and the factors and ``priors.FIXED_SPREAD`` for the fixed costs. ``--check`` regenerates in
memory and fails if the shipped file differs (CI: the file is what the corpus says).
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import corpus
from slurm_yolo.core import config
from slurm_yolo.core.model import fitting, priors
from slurm_yolo.core.model.timemodel import Sample, TimeModel
from slurm_yolo.state import calibration

REF = 8.86
DDP = 0.9
DRAWS = 40
SEED = 5
DIGITS = 4  # significant digits kept: the file reads as a table, and regenerates to the same bytes


def config_prior() -> TimeModel:
    """The config's priors alone (``estimate.priors = "config"``): what the corpus fit starts from."""
    cfg = config.load(Path("/nonexistent"))
    cfg.estimate = replace(cfg.estimate, priors="config")
    return calibration.prior(cfg)


def _values(tm: TimeModel) -> dict[str, float]:
    """A fit's shipped terms under fitting's names, in log units where the fit is (for spreads)."""
    out = {}
    for name, field in fitting.FIELDS.items():
        if field in priors.TERMS:
            value = getattr(tm, field)
            out[name] = value if name in fitting.LINEAR_TERMS else math.log(max(value, fitting.FLOOR))
    for group in priors.FACTORS:
        for key, value in getattr(tm, fitting.FACTOR_FIELDS[group]).items():
            out[f"{group}:{key}"] = math.log(value)
    return out


def _round(x: float) -> float:
    return float(f"{x:.{DIGITS}g}")


def fit_priors(samples: list[Sample], base: TimeModel, source: str, draws: int = DRAWS) -> dict[str, Any]:
    """The priors file's content for these runs (``priors.shipped``'s format); ``draws`` bootstrap
    refits set the spreads."""
    tm = fitting.fit_terms(samples, base, DDP, REF)
    rng = random.Random(SEED)
    refits = [_values(fitting.fit_terms([rng.choice(samples) for _ in samples], base, DDP, REF)) for _ in range(draws)]
    spreads = {}
    for name in _values(tm):
        seen = [d[name] for d in refits if name in d]
        floor = (
            fitting.SPREAD[name]
            if name in priors.WIDE
            else priors.FIXED_SPREAD
            if name in fitting.LOG_TERMS
            else priors.MIN_SPREAD
        )
        spreads[name] = _round(max(floor, 2 * statistics.pstdev(seen) if len(seen) > 1 else floor))
    return {
        "source": source,
        "terms": {t: _round(getattr(tm, t)) for t in priors.TERMS},
        "factors": {
            g: {k: _round(v) for k, v in sorted(getattr(tm, fitting.FACTOR_FIELDS[g]).items())} for g in priors.FACTORS
        },
        "spreads": dict(sorted(spreads.items())),
    }


def corpus_priors(path: Path = corpus.CORPUS) -> dict[str, Any]:
    runs = corpus.load(path)
    source = (
        f"{path.name}: {len(runs)} real ultralytics CPU runs (2 CPUs each), fitted by `python -m bench priors`"
        f" ({DRAWS} bootstrap refits for the spreads)"
    )
    return fit_priors([s for _, s in runs], config_prior(), source)


def text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[2:] if argv is None else argv
    fresh = text(corpus_priors())
    if args == ["--check"]:
        if priors.PRIORS.read_text() != fresh:
            sys.exit(f"{priors.PRIORS} is not what the corpus gives: run python -m bench priors")
        print(f"{priors.PRIORS.name}: what the corpus gives")
        return
    priors.PRIORS.write_text(fresh)
    print(f"wrote {priors.PRIORS}")
