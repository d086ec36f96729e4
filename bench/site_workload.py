"""The site replay's workload: a scenario file's jobs, or the jobs its mix draws (seeded), each with a
YOLO command, who submits it when, the habits a user without the product has, and its TRUE run time
on each GPU type, drawn apart from any plan (``site_standin.true_seconds``: the GPU-type prior times
an error ratio drawn from the product's own leave-one-source-out errors, their bias included).

A scenario file (docs/benchmarks.md, "The site replay"):

    {"name": "seed", "scale": 60, "seed": 7,
     "cluster": {"partitions": [{"name": "a100", "gpu_type": "a100", "nodes": 1, "gpus_per_node": 2,
                                 "cpus_per_node": 32, "memory_mb": 256000, "max_time_minutes": 2880}, ...]},
     "prices": {"a100": 3000, "t4": 1000},                 tokens per GPU-second
     "users": {"alice": {"account": "vision", "partition": "a100"}, ...},
     "habits": {"cpus_per_task": 4, "time": "max"},
     "jobs": [{"user": "alice", "submit_s": 0, "command": "train model=yolov8s.yaml data=coco epochs=50",
               "ratio": 1.1, "gpus": 1}, ...]
     or "mix": {...}: see ``draw``}

``data=`` names a dataset by its size: ``coco`` (118,287 train and 5,000 val images), or
``images:N`` (N train images, a tenth as many to validate).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import site_standin
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
COCO = (118287, 5000)


@dataclass(frozen=True)
class Job:
    """One job of the workload."""

    name: str
    user: str
    account: str
    submit: float  # simulated seconds after the replay starts
    words: tuple[str, ...]  # yolo train words, data= the dataset's yaml once written
    dataset: tuple[int, int]  # train, val images
    ratio: float  # true / the GPU-type prior's prediction (never seen by a plan)
    habit_partition: str
    habit_gpus: int = 1

    def workload(self) -> dict[str, Any]:
        s = spec.parse(list(self.words))
        model = estimate.lookup_model(s.model)
        assert model is not None, s.model
        return estimate.workload(s, self.dataset[0], self.dataset[1], model).to_dict()

    def true_seconds(self, gpu_type: str, gpus: int, cores: int, share: float = 0.0) -> float:
        return site_standin.true_seconds(self.workload(), gpu_type, gpus, cores, self.ratio, share)


@dataclass
class Scenario:
    name: str
    scale: float  # simulated seconds per real second
    cluster: dict[str, Any]
    prices: dict[str, float]
    users: dict[str, dict[str, str]]
    habits: dict[str, Any]
    jobs: list[Job]
    history: list[Job] = field(default_factory=list)  # the calibrated arm's site history: runs it fitted on
    claims: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def gpu_types(self) -> dict[str, str]:
        return {p["name"]: p["gpu_type"] for p in self.cluster["partitions"]}

    @property
    def capacity(self) -> float:
        return float(sum(p["nodes"] * p["gpus_per_node"] for p in self.cluster["partitions"]))


def dataset_of(text: str) -> tuple[int, int]:
    if text in ("coco", "coco.yaml"):
        return COCO
    if text.startswith("images:"):
        n = int(text.split(":", 1)[1])
        return n, max(10, n // 10)
    raise ValueError(f"data={text}: coco or images:N")


def _pick(rng: random.Random, choices: list[list[Any]]) -> Any:
    """One value of ``[[value, weight], ...]``."""
    return rng.choices([c[0] for c in choices], weights=[float(c[1]) for c in choices])[0]


def draw(mix: dict[str, Any], users: dict[str, dict[str, str]], rng: random.Random, errors: list[float]) -> list[Job]:
    """The mix's jobs: each user's burst at time 0, then Poisson arrivals over ``arrival_hours`` at
    ``arrivals_per_hour``; models, datasets, image sizes and epochs from their weights; a job whose
    prior on the fastest card is past ``max_hours`` is drawn again (what the replay's clock can hold)."""
    jobs: list[Job] = []
    times = [0.0] * (int(mix["burst_per_user"]) * len(users))
    t = 0.0
    while True:
        t += rng.expovariate(float(mix["arrivals_per_hour"]) / 3600)
        if t > float(mix["arrival_hours"]) * 3600:
            break
        times.append(t)
    names = sorted(users)
    for i, submit in enumerate(times):
        user = names[i % len(names)] if submit == 0 else rng.choice(names)
        while True:
            data = _pick(rng, mix["datasets"])
            words = (
                "train",
                f"model={_pick(rng, mix['models'])}",
                f"data={data}",
                f"epochs={_pick(rng, mix['epochs'])}",
                f"imgsz={_pick(rng, mix['imgsz'])}",
                f"batch={_pick(rng, mix['batch'])}",
            )
            ratio = math.exp(rng.choice(errors))
            job = Job(
                f"j{i:03d}",
                user,
                users[user]["account"],
                submit,
                words,
                dataset_of(data),
                ratio,
                users[user]["partition"],
            )
            if job.true_seconds(mix["fastest"], 1, 8) / ratio <= float(mix["max_hours"]) * 3600:
                break
        gpus = 2 if job.true_seconds(mix["fastest"], 1, 8) > float(mix.get("two_gpus_past_hours", 1e9)) * 3600 else 1
        jobs.append(Job(**{**job.__dict__, "habit_gpus": gpus}))
    return jobs


def loso_errors() -> list[float]:
    """log(published / predicted) of every public GPU figure, predicted by the priors fitted without
    its source (``bench gpu-accuracy``'s day-one errors): the replay's true times err as the product's
    plans are measured to err."""
    from bench import gpu_accuracy, gpu_corpus

    points, _ = gpu_corpus.load()
    return [log for _, log in gpu_accuracy.day_one(tuple(points))]


def load(arg: str, seed: int | None = None) -> Scenario:
    """A scenario by name (``bench/scenarios/NAME.json``) or path; ``seed``: another draw of its mix
    than the file's own seed (a spread over seeds: the same workload's kind, other jobs)."""
    path = Path(arg) if arg.endswith(".json") else SCENARIOS / f"{arg}.json"
    data = json.loads(path.read_text())
    if seed is not None:
        data["seed"] = seed
    users = data["users"]
    rng = random.Random(int(data.get("seed", 0)))
    notes = list(data.get("notes", []))
    if "mix" in data:
        errors = loso_errors()
        jobs = draw(data["mix"], users, rng, errors)
        history = draw(
            {**data["mix"], "arrival_hours": 0, "burst_per_user": data["mix"]["history_per_user"]}, users, rng, errors
        )
        bias = sum(errors) / len(errors)
        notes.append(
            f"true times: the GPU-type priors' time x exp(e), e drawn (seed {data.get('seed', 0)}) from the"
            f" {len(errors)} leave-one-source-out day-one log errors of `python -m bench gpu-accuracy` (mean"
            f" {bias:+.3f}: runs take x{math.exp(bias):.2f} the prior on average)"
        )
    else:
        jobs = [
            Job(
                str(j.get("name", f"j{i:03d}")),
                j["user"],
                users[j["user"]]["account"],
                float(j["submit_s"]),
                tuple(j["command"].split()),
                dataset_of(next(w.split("=", 1)[1] for w in j["command"].split() if w.startswith("data="))),
                float(j.get("ratio", 1.0)),
                j.get("partition", users[j["user"]]["partition"]),
                int(j.get("gpus", 1)),
            )
            for i, j in enumerate(data["jobs"])
        ]
        history = []
    return Scenario(
        data["name"],
        float(data["scale"]),
        data["cluster"],
        {k: float(v) for k, v in data["prices"].items()},
        users,
        data["habits"],
        jobs,
        history,
        list(data.get("claims", [])),
        notes,
    )
