"""``python -m bench [dry-run|accuracy|all]``: run from the repository root with the venv's python.

``python -m bench priors [--check]`` fits the shipped priors on the corpus (``slurm_yolo/data/priors.json``);
``python -m bench gpu-priors [--check]`` the GPU-type priors on the public GPU corpus (``data/gpu_priors.json``);
``python -m bench gpu [--cpu]`` measures training on this machine's GPU (a lent one: about 8 minutes).
``python -m bench corpus [options]`` (re)generates the accuracy corpus: an hour of training, never
part of ``all``; nor is ``python -m bench array`` (a 1000-task GPU array with and without the hooks on
the bundled cluster: about 20 minutes). ``python -m bench site SCENARIO`` replays a workload of YOLO jobs on
Slurm's own scheduler once per arm (habits, slurm-yolo, its day one, an oracle): ``site seed`` about 20 minutes."""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import (
    accuracy,
    admission,
    array,
    corpus,
    dataset,
    dry_run,
    gpu,
    gpu_accuracy,
    gpu_priors,
    hooks,
    ledger,
    priors,
    report,
    site,
)

BENCHES: dict[str, Callable[[], object]] = {
    "dry-run": dry_run.main,
    "hooks": hooks.main,
    "admission": admission.main,
    "ledger": ledger.main,
    "dataset": dataset.main,
    "report": report.main,
    "accuracy": accuracy.main,
    "gpu-accuracy": gpu_accuracy.main,
}
LONG: dict[str, Callable[[], object]] = {"array": array.main}  # asked for by name only

# Commands that take their own arguments (python -m bench NAME ARGS...), never part of ``all``
COMMANDS: dict[str, Callable[[list[str]], object]] = {
    "corpus": corpus.main,
    "priors": priors.main,
    "gpu": gpu.main,
    "gpu-priors": gpu_priors.main,
    "site": site.main,
}

if __name__ == "__main__":
    if sys.argv[1:2] and sys.argv[1] in COMMANDS:
        COMMANDS[sys.argv[1]](sys.argv[2:])
        sys.exit(0)
    names = sys.argv[1:] or ["all"]
    for name in BENCHES if names == ["all"] else names:
        if name not in BENCHES | LONG:
            sys.exit(f"unknown benchmark {name!r} (choose from {', '.join(BENCHES | LONG)}, all)")
        print(f"== {name}")
        (BENCHES | LONG)[name]()
