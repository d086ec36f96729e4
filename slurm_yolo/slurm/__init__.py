"""Every call of a Slurm command, in one place.

``run(argv)`` is the only seam: commands are found by absolute path (slurmctld-side hooks run with
no PATH), argv lists never pass through a shell, and a command is judged by its exit code, with its
own last stderr line as the one-line error. Parsers of the output are pure functions in ``parsers``.
"""

from __future__ import annotations

import logging
import os
import shlex
import time
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.core.errors import SlurmError, UnreachableError

logger = logging.getLogger(__name__)
BIN_DIR = Path("/usr/bin")
# What Slurm's clients print when slurmdbd or slurmctld does not answer (22.05 and 24.11), as opposed
# to a refusal of the request itself.
UNREACHABLE = (
    "Connection refused",
    "Problem talking to the database",
    "persistent connection",
    "Unable to contact slurm controller",
    "Socket timed out",
    "Transport endpoint is not connected",
)


class Result(NamedTuple):
    """A finished Slurm command."""

    argv: tuple[str, ...]
    stdout: str
    stderr: str
    returncode: int = 0


def _binary(name: str, bin_dir: Path | None) -> str:
    for base in (bin_dir, BIN_DIR):
        if base and (base / name).is_file():
            return str(base / name)
    return name


def run(
    argv: list[str],
    *,
    input: str | None = None,
    timeout: float = 30.0,
    bin_dir: Path | None = None,
    time_format: str = "standard",
    check: bool = True,
) -> Result:
    """Run a Slurm command; a failure raises SlurmError with Slurm's own reason (UnreachableError when
    a daemon did not answer; with ``check`` False only then, and the caller reads the rest of the
    result itself). ``time_format``: how it prints times (the money path asks for epoch seconds, ``%s``)."""
    import subprocess  # offline dry runs never call Slurm: keep their start-up light

    conf = os.environ.get("SLURM_CONF")
    if conf and not os.path.isfile(conf):  # Slurm's clients would retry reading it for 60 s, then fail
        raise UnreachableError(
            f"SLURM_CONF={conf} is no file: Slurm's commands cannot read their configuration"
            " (unset SLURM_CONF, or point it at the cluster's slurm.conf)"
        )
    full = [_binary(argv[0], bin_dir), *argv[1:]]
    env = {**os.environ, "SLURM_TIME_FORMAT": time_format}
    if logger.isEnabledFor(logging.DEBUG):  # the hooks call Slurm on every job: no joining for nothing
        logger.debug("slurm: %s", shlex.join(full))
    started = time.monotonic()
    try:
        # Users' text (job names, comments, paths) may hold any byte: never a decoding error of ours
        proc = subprocess.run(
            full, input=input, capture_output=True, encoding="utf-8", errors="replace", timeout=timeout, env=env
        )
    except FileNotFoundError:
        raise SlurmError(f"{argv[0]}: command not found (is Slurm installed?)") from None
    except subprocess.TimeoutExpired as e:  # what Slurm said meanwhile says why (a controller it retries)
        said = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        first = next((ln.strip() for ln in said.splitlines() if ln.strip()), "")
        raise UnreachableError(
            f"{argv[0]}: no answer from Slurm within {timeout:.0f}s" + (f" (it said: {first[:300]})" if first else "")
        ) from None
    logger.debug("slurm: %s exited %d in %.2f s", argv[0], proc.returncode, time.monotonic() - started)
    if proc.returncode != 0:
        text = proc.stderr or proc.stdout
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        ours = [ln for ln in lines if "slurm-yolo:" in ln]  # job_submit.lua's reason beats Slurm's generic last line
        # "Try 'sbatch --help'" follows the real reason (an option this host's sbatch lacks: no SPANK plugin)
        told = [ln for ln in lines if not ln.startswith("Try ")] or lines
        reason = (ours or told)[-1] if lines else f"exit code {proc.returncode}"
        unreachable = any(marker in text for marker in UNREACHABLE)
        if unreachable or check:
            raise (UnreachableError if unreachable else SlurmError)(f"{argv[0]} failed: {reason}")
    return Result(argv=tuple(full), stdout=proc.stdout, stderr=proc.stderr, returncode=proc.returncode)


# A child that sleeps, then becomes the command (execv: no shell, argv passed through untouched).
_AFTER = "import os, sys, time; time.sleep(float(sys.argv[1])); os.execv(sys.argv[2], sys.argv[2:])"


def detached(argv: list[str], env: dict[str, str], bin_dir: Path | None = None, after: float = 0.0) -> None:
    """Start ``argv`` in its own session and do not wait (no inherited stdio): what a slurmctld hook
    may not wait for. A Slurm command's name is found like ``run``'s; other programs by their path.
    ``after`` seconds delay it: a PrologSlurmctld's own ``scancel`` must land once slurmctld has seen
    the prolog end, since killing a job whose prolog still runs flushes the job's scripts, and on
    22.05 that SIGKILLs the EpilogSlurmctld the kill itself just started (its run never settles)."""
    import subprocess
    import sys

    full = [_binary(argv[0], bin_dir) if "/" not in argv[0] else argv[0], *argv[1:]]
    if after > 0:
        full = [sys.executable, "-c", _AFTER, str(after), *full]
    subprocess.Popen(
        full,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
        env=env,
    )
