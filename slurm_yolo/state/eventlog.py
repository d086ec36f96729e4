"""hooks.log: one JSON line per hook event, settlement side step and failure, for admins alone.

It sits in the state's private folder: what users sent (job names, comments) is read by admins only,
and no user can hold the file open.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from slurm_yolo.core.config import Config
from slurm_yolo.state import db

logger = logging.getLogger(__name__)


def log_path(config: Config) -> Path:
    return db.private_dir(config.state_dir) / "hooks.log"


def log_event(config: Config, record: dict[str, object], name: str = "hooks.log") -> None:
    """Append one JSON line to a log in the private folder (``hooks.log``; the watchdog's), as the
    state's owner and mode 0600 (stderr if the private folder is not writable)."""
    try:
        line = (json.dumps({"at": time.time(), **record}) + "\n").encode()
        with db.as_state_owner(config.state_dir, config.paths.owner):
            fd = os.open(
                db.make_private(config.state_dir) / name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600
            )
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        logger.warning("%s", json.dumps(record))  # the private folder is not writable: not lost
