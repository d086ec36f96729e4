"""The shipped priors: the time model's shape fitted on the project's corpus of real runs (import-light).

Eighteen small runs of a site cannot teach how the cost per pixel bends with the image size, what a
model or a family costs beside its GFLOPs, or how the cost of a step grows with the model: left at
guesses, those terms made a site's calibration predict runs over new dimensions 17% short. So the
package ships them as fitted on ``bench/corpus/runs.jsonl`` (``python -m bench priors`` regenerates
``data/priors.json``), each with a spread that says how sure the corpus is (twice its bootstrap
spread, at least ``MIN_SPREAD``: one machine's corpus, not every site's), and a site's fit (a MAP
estimate: ``fitting``) moves ``k`` first and the rest only as far as its own runs reach. The start-up
and ``k`` stay the config's: jobs teach the one, a site's speed is the other. ``estimate.priors =
"config"`` turns this off (every term from the config, with ``fitting.SPREAD``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from slurm_yolo.core.model.timemodel import FACTOR_FIELDS, TimeModel

PRIORS = Path(__file__).resolve().parents[2] / "data" / "priors.json"
# The terms the corpus sets: its shape, its fixed costs and its factors (not k, not the start-up).
TERMS = (
    "overhead_seconds",
    "epoch_seconds",
    "val_pass_seconds",
    "iteration_seconds",
    "val_weight",
    "image_seconds",
    "val_image_seconds",
    "imgsz_exponent",
    "imgsz_curvature",
    "batch_exponent",
    "iteration_exponent",
)
FACTORS = ("family", "model", "step")  # FACTOR_FIELDS groups the corpus fits
MIN_SPREAD = 0.1  # log units (~10%): the least uncertainty a term carries from one machine's runs
# Terms whose sign a GPU turns round (a big batch spills a CPU's caches, and fills a GPU better): the
# corpus sets their value, never their certainty (fitting.SPREAD's). With 0.1, a GPU-like site of 24
# runs (batch exponent -0.2) kept +0.12 and was predicted 17% off; with 0.8 the CPU site loses nothing.
WIDE = ("batch_exponent",)
FIXED_SPREAD = 1.0  # the fixed costs (seconds) of a 2-CPU machine are a GPU node's within a factor e


@cache
def shipped(path: Path = PRIORS) -> dict[str, Any]:
    """The priors file: {"source", "terms", "factors", "spreads"} (see ``bench/priors.py``)."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def apply(base: TimeModel, priors: dict[str, Any]) -> TimeModel:
    """``base`` (the config's prior) with the corpus' terms, factors and spreads in place of its own."""
    changes: dict[str, Any] = {t: priors["terms"][t] for t in TERMS}
    for g in FACTORS:
        changes[FACTOR_FIELDS[g]] = {**getattr(base, FACTOR_FIELDS[g]), **priors["factors"].get(g, {})}
    return replace(base, **changes, spreads=dict(priors["spreads"]))
