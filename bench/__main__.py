"""``python -m bench [dry-run|accuracy|all]``: run from the repository root with the venv's python.

``python -m bench corpus [options]`` (re)generates the accuracy corpus: an hour of training, never
part of ``all``."""

from __future__ import annotations

import sys
from collections.abc import Callable

from bench import accuracy, admission, corpus, dataset, dry_run, hooks, ledger, report

BENCHES: dict[str, Callable[[], object]] = {
    "dry-run": dry_run.main,
    "hooks": hooks.main,
    "admission": admission.main,
    "ledger": ledger.main,
    "dataset": dataset.main,
    "report": report.main,
    "accuracy": accuracy.main,
}

if __name__ == "__main__":
    if sys.argv[1:2] == ["corpus"]:
        corpus.main(sys.argv[2:])
        sys.exit(0)
    names = sys.argv[1:] or ["all"]
    for name in BENCHES if names == ["all"] else names:
        if name not in BENCHES:
            sys.exit(f"unknown benchmark {name!r} (choose from {', '.join(BENCHES)}, all)")
        print(f"== {name}")
        BENCHES[name]()
