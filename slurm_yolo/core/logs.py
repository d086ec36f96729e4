"""stdlib logging, set up once per entry point: one handler on the ``slurm_yolo`` logger, to stderr.

The level is ``SLURM_YOLO_LOG_LEVEL`` (DEBUG, INFO, WARNING, ERROR), or DEBUG with ``slurm-yolo
--debug``; INFO by default, so what the hooks, hookd and the launcher have always said still shows.
Modules log through ``logging.getLogger(__name__)``; where no entry point set this up (a library
caller, a test), warnings still reach stderr through logging's last resort. The admins' JSON event
log (``state.eventlog``) is a record of what was done, not diagnostics, and stays its own file.
"""

from __future__ import annotations

import logging
import os
import sys

ROOT = "slurm_yolo"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Whatever ``sys.stderr`` is when a record is written (click's test runner swaps it)."""

    @property  # type: ignore[override]
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def level(debug: bool = False) -> int:
    """The level an entry point logs at: DEBUG with ``debug``, else SLURM_YOLO_LOG_LEVEL's, else INFO."""
    name = "DEBUG" if debug else os.environ.get("SLURM_YOLO_LOG_LEVEL", "INFO").strip().upper()
    return int(getattr(logging, name)) if name in LEVELS else logging.INFO


def setup(debug: bool = False) -> None:
    """Give the package's logger its one stderr handler (again: only the level changes)."""
    logger = logging.getLogger(ROOT)
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(level(debug))
