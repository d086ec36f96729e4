"""hookd: a resident server for the slurmctld hooks, so a job start or end costs a socket round trip
instead of a Python start and a Slurm accounting query.

slurm.conf points PrologSlurmctld and EpilogSlurmctld at the C client ``slurm-yolo-hook``
(spank/yolo_hook.c). It forwards the hook's environment here and waits for the answer:

- a prolog is answered once its hold is in the ledger (the job starts with its tokens held);
- an epilog is answered once its event is in the ledger's inbox (committed: a kill -9 right after
  the answer loses nothing). The settler thread (``settler``) settles it from sacct's final record,
  in batches, while slurmctld goes on; rows left by a killed server are settled at the next start;
- on a ledger several clusters share, job_submit.lua asks whether a job fits (``shared_admission``).

When the server does not answer, the client runs the Python hooks itself, so nothing depends on it.
The handlers are the hooks' own (``hooks.main``), so both paths hold and record the same way. The
config is read once, at start. Side work (Slurm limits, AdminComments, feedback, a prolog's own
cancel) is done in turn by one worker thread: hookd starts no detached children.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import socketserver
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path
from typing import Generic, TypeVar

from slurm_yolo.controller import hooks, shared_admission
from slurm_yolo.controller.settler import Settler, Worker
from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.slurm import commands
from slurm_yolo.slurm.records import JobRecord
from slurm_yolo.state import db

logger = logging.getLogger(__name__)
T = TypeVar("T")
EVENTS = ("prolog", "epilog")
MAX_REQUEST = 1 << 20
READ_TIMEOUT_SECONDS = 10.0


def parse_request(data: bytes) -> tuple[str, dict[str, str]]:
    """``EVENT\\0KEY=VALUE\\0...`` (what the client sends) as (event, environment)."""
    event, *pairs = data.decode("utf-8", "surrogateescape").split("\0")
    if event not in EVENTS:
        raise ValueError(f"unknown event {event[:20]!r}")
    env = {}
    for pair in filter(None, pairs):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError("malformed environment entry")
        env[key] = value
    if not env.get("SLURM_JOB_ID", "").isdigit():
        raise ValueError("no numeric SLURM_JOB_ID")
    return event, env


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end (the kernel's word, not the client's)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


CONFIG_QUESTION = b"config\0"  # the doctor's: which config this hookd serves


def _read_request(sock: socket.socket) -> bytes:
    chunks, size = [], 0
    while chunk := sock.recv(65536):
        size += len(chunk)
        if size > MAX_REQUEST:
            raise ValueError("request too large")
        chunks.append(chunk)
    return b"".join(chunks)


class Batched(Generic[T]):
    """Lookups of many hooks, merged: one thread makes the Slurm calls, each for every job asked for
    while the previous call ran, so 50 jobs starting or ending at once cost a few calls, not 50."""

    def __init__(self, fetch: Callable[[list[int]], dict[int, T]], missing: T | None) -> None:
        self._fetch = fetch
        self._missing = missing  # the answer for a job the call did not return
        self._asked: dict[int, Future[T | None]] = {}
        self._cond = threading.Condition()
        threading.Thread(target=self._serve, name="batched", daemon=True).start()

    def get(self, job_id: int) -> T | None:
        """The job's answer; None when the call failed (the hook then asks Slurm itself)."""
        with self._cond:
            future = self._asked.setdefault(job_id, Future())
            self._cond.notify()
        return future.result()

    def _serve(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._asked))
                batch, self._asked = self._asked, {}
            try:
                found = self._fetch(list(batch))
                answers = {job_id: found.get(job_id, self._missing) for job_id in batch}
            except Exception:  # noqa: BLE001 - every waiting hook falls back on its own call
                answers = dict.fromkeys(batch)
            for job_id, future in batch.items():
                future.set_result(answers[job_id])


def _answer(sock: socket.socket, text: str) -> None:
    """Reply; a client gone meanwhile (killed, timed out) has run the Python hook itself, which
    finds the work done."""
    with contextlib.suppress(OSError):
        sock.sendall(text.encode())


class _Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        started = time.perf_counter()
        sock: socket.socket = self.request
        sock.settimeout(READ_TIMEOUT_SECONDS)
        if peer_uid(sock) not in (0, os.geteuid()):
            with contextlib.suppress(ValueError, OSError):  # read first (bounded): a peer still sending
                _read_request(sock)  # to a closed socket gets an error instead of the answer
            _answer(sock, "error: permission denied\n")
            return
        try:
            data = _read_request(sock)
            if data == CONFIG_QUESTION:
                _answer(sock, f"{self.server.config_mtime!r} {self.server.config.path or ''}\n")
                return
            if data.startswith(shared_admission.EVENT.encode() + b"\0"):
                self._admit(sock, data)
                return
            event, env = parse_request(data)
        except (ValueError, OSError) as e:
            _answer(sock, f"error: {e}\n")
            return
        server = self.server
        record = server.jobs.get(int(env["SLURM_JOB_ID"])) if event == "prolog" else None
        # "ok" only once the hold, or the epilog's inbox row, is committed: otherwise the client runs
        # the Python hook itself, which tries again and, failing too, cancels the job (fail closed).
        done = hooks.main(event, env=env, record=record, config=server.config, settler=server.settler, started=started)
        _answer(sock, "ok\n" if done else f"error: the {event} was not recorded (see hooks.log)\n")

    def _admit(self, sock: socket.socket, data: bytes) -> None:
        """A job_submit.lua's question on a shared ledger (``shared_admission``): its answer line."""
        request = shared_admission.parse([f for f in data.decode("utf-8", "surrogateescape").split("\0")[1:] if f])
        _answer(sock, self.server.admissions.ask(request))


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """One thread per hook, the settler's thread and its followups' worker; ``close`` waits for the
    hooks in hand and stops the settler (what it has not settled stays in the inbox)."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, path: Path, config: Config) -> None:
        self.config = config  # read once, at start: never chosen by a request
        self.config_mtime = config.path.stat().st_mtime if config.path else 0.0  # what the doctor compares
        bin_dir = config.bin_dir
        self.jobs: Batched[JobRecord] = Batched(partial(commands.current_runs, bin_dir=bin_dir), missing=None)
        old = os.umask(0o177)  # the socket: the SlurmUser (and root) only
        try:
            super().__init__(str(path), _Handler)
        finally:
            os.umask(old)
        self.admissions = shared_admission.Answers(config)
        self.settler = Settler(config, Worker(config))  # after: its files must not get the socket's umask

    def close(self) -> None:
        Path(self.server_address).unlink(missing_ok=True)  # type: ignore[arg-type]  # clients fall back now
        self.server_close()
        self.settler.stop()


def served_config(path: Path) -> tuple[float, str] | None:
    """The config the hookd at ``path`` read at its start: the file's modification time then, and its
    path ('' for none); None when no hookd answers (or one from before it was asked this)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5.0)
        try:
            probe.connect(str(path))
            probe.sendall(CONFIG_QUESTION)
            probe.shutdown(socket.SHUT_WR)
            reply = _read_request(probe).decode("utf-8", "replace")
        except (OSError, ValueError):
            return None
    mtime, _, served = reply.rstrip("\n").partition(" ")
    try:
        return float(mtime), served
    except ValueError:
        return None


def answers(path: Path) -> bool:
    """Whether a hookd listens at ``path`` (a connection is taken; nothing is asked)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
            return True
        except OSError:
            return False


def _drop_to(owner: str, run_dir: Path) -> None:
    """Started as root (systemd, minicluster): make the socket folder, then become the SlurmUser for
    good, like the hooks slurmctld runs, so the ledger's files keep their owner."""
    import pwd

    try:
        pw = pwd.getpwnam(owner)
    except KeyError:
        raise SlurmYoloError(f"hookd: paths.owner {owner!r} is not a user on this machine") from None
    run_dir.mkdir(parents=True, exist_ok=True)
    os.chown(run_dir, pw.pw_uid, pw.pw_gid)
    run_dir.chmod(0o755)
    os.setgroups([])
    os.setgid(pw.pw_gid)
    os.setuid(pw.pw_uid)


def serve(config: Config) -> None:
    """Serve the hooks until SIGTERM or SIGINT; queued settlements finish before it returns."""
    path = Path(config.hookd.socket)
    if os.geteuid() == 0:
        _drop_to(config.paths.owner, path.parent)
    db.reuse_connections()
    if answers(path):
        raise SlurmYoloError(f"hookd: another server answers on {path}")
    path.unlink(missing_ok=True)  # a stale socket from a killed server
    try:
        server = Server(path, config)
    except OSError as e:
        raise SlurmYoloError(f"hookd: cannot listen on {path}: {e.strerror}") from None

    def stop(*_: object) -> None:  # shutdown() waits for serve_forever: not from its own thread
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info("slurm-yolo hookd: serving %s as uid %d", path, os.geteuid())
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.close()
        db.close_idle()
