"""hookd: a resident server for the slurmctld hooks, so a job start or end costs a socket round trip
instead of a Python start and a Slurm accounting query.

slurm.conf points PrologSlurmctld and EpilogSlurmctld at the C client ``slurm-yolo-hook``
(spank/yolo_hook.c). It forwards the hook's environment here and waits for the answer:

- a prolog is answered once its hold is in the ledger (the job starts with its tokens held);
- an epilog is answered once it is queued. Its settlement needs the run's final state from sacct,
  which on an idle slurmdbd takes ~90 ms (TCP delayed acknowledgements on its persistent connection),
  so a worker thread settles it while slurmctld goes on. A settlement lost with the server (kill -9)
  is what a slurmdbd outage leaves too, and ``slurm-yolo ledger reconcile`` settles it from sacct.

When the server does not answer, the client runs the Python hooks itself, so nothing depends on it.
The handlers are the hooks' own (``hooks.main``), so both paths hold and settle the same way. The
children they start detached (late settlements, feedback, AdminComments, enforcement) are hookd's
children: it reaps each as it ends (``reap_on_sigchld``), so none stays ``<defunct>``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import socketserver
import struct
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Generic, TypeVar

from . import db, hooks
from .config import ENV_OVERRIDES, Config, config_path, load
from .errors import SlurmYoloError
from .slurm import commands
from .slurm.records import JobRecord

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


class Configs:
    """Configs by the file that holds them, read again when it changes (a hook's environment may
    name its own, as tests and benchmarks do); parsing TOML per hook would be most of its work."""

    def __init__(self) -> None:
        self._cache: dict[tuple[str, ...], tuple[tuple[int, int], Config]] = {}
        self._lock = threading.Lock()

    def get(self, env: dict[str, str]) -> Config | None:
        """None when the file cannot be read: the hook then loads it itself, and says why."""
        key = tuple(env.get(k, "") for k in ENV_OVERRIDES)  # they alone choose the file
        path = config_path(env)
        try:
            st = path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = (0, 0)
        with self._lock:
            cached = self._cache.get(key)
        if cached and cached[0] == stamp:
            return cached[1]
        try:
            config = load(path, env=env)
        except SlurmYoloError:
            return None
        with self._lock:
            self._cache[key] = (stamp, config)
        return config


def _answer(sock: socket.socket, text: str) -> None:
    """Reply; a client gone meanwhile (killed, timed out) has run the Python hook itself, which
    finds the work done."""
    with contextlib.suppress(OSError):
        sock.sendall(text.encode())


class _Handler(socketserver.BaseRequestHandler):
    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        if peer_uid(sock) not in (0, os.geteuid()):
            _answer(sock, "error: permission denied\n")
            return
        sock.settimeout(READ_TIMEOUT_SECONDS)
        try:
            event, env = parse_request(_read_request(sock))
        except (ValueError, OSError) as e:
            _answer(sock, f"error: {e}\n")
            return
        config, server = self.server.configs.get(env), self.server
        if event == "prolog":
            record = server.jobs.get(int(env["SLURM_JOB_ID"]))
            with server.prolog_turn:
                done = hooks.main("prolog", env=env, record=record, config=config)
            # "ok" only for a hold that is in the ledger: otherwise the client runs the Python hook,
            # which tries again and, failing too, leaves the incident reconcile settles.
            _answer(sock, "ok\n" if done else "error: the prolog did not hold (see hooks.log)\n")
            return
        server.settlements.submit(hooks.main, "epilog", env=env, config=config, runs=server.runs.get)
        _answer(sock, "ok\n")  # queued: a settlement that fails is an incident, and reconcile settles it


class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """One thread per hook; ``close`` waits for the hooks in hand and drains the bounded pool the
    epilog settlements run in."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, path: Path, workers: int, bin_dir: Path) -> None:
        self.settlements = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="settle")
        self.jobs: Batched[JobRecord] = Batched(partial(commands.current_runs, bin_dir=bin_dir), missing=None)
        self.runs: Batched[list[JobRecord]] = Batched(partial(commands.job_runs, bin_dir=bin_dir), missing=[])
        self.configs = Configs()
        # Prologs are Python work under one GIL: taken in turn, those a lookup releases together
        # finish one by one instead of all late (thread switches cost more than the wait).
        self.prolog_turn = threading.Lock()
        old = os.umask(0o177)  # the socket: the SlurmUser (and root) only
        try:
            super().__init__(str(path), _Handler)
        finally:
            os.umask(old)

    def close(self) -> None:
        Path(self.server_address).unlink(missing_ok=True)  # type: ignore[arg-type]  # clients fall back now
        self.server_close()
        self.settlements.shutdown(wait=True)


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
            return True
        except OSError:
            return False


def _children() -> set[int]:
    """This process's children (those of every thread), from /proc."""
    if not Path(f"/proc/self/task/{os.getpid()}/children").exists():
        return _children_by_scan()  # a kernel without the children file
    pids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, ValueError):  # a thread that just ended: its children are another's
            pids.update(int(p) for p in (task / "children").read_text().split())
    return pids


def _children_by_scan() -> set[int]:
    me = os.getpid()
    pids = set()
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat and int(stat[1]) == me:
                pids.add(int(entry.name))
    return pids


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` after the command name: state, ppid, pgrp, session, ..."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def reap_detached() -> int:
    """Reap the children that ended in a session of their own: those the hooks start detached
    (``slurm.detached``: settlements sacct is late for, feedback, AdminComments, enforcement), which
    nobody waits for and which would stay ``<defunct>`` while hookd runs. A child of
    ``subprocess.run`` stays in hookd's session and is its caller's to wait for (its status taken
    here, the caller would read exit code 0), so it is left alone. How many were reaped."""
    reaped = 0
    for pid in _children():
        stat = _stat(pid)
        if stat and stat[0] == "Z" and int(stat[3]) == pid:
            with contextlib.suppress(ChildProcessError):
                reaped += os.waitpid(pid, os.WNOHANG)[0] == pid
    return reaped


def reap_on_sigchld() -> None:
    """Reap detached children as they end (from the main thread, where Python runs signal handlers).
    System calls the signal interrupts in other threads restart, as without a handler."""
    signal.signal(signal.SIGCHLD, lambda *_: reap_detached())
    signal.siginterrupt(signal.SIGCHLD, False)


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
    path = Path(config["hookd"]["socket"])
    if os.geteuid() == 0:
        _drop_to(config["paths"]["owner"], path.parent)
    db.reuse_connections()
    if _answers(path):
        raise SlurmYoloError(f"hookd: another server answers on {path}")
    path.unlink(missing_ok=True)  # a stale socket from a killed server
    try:
        server = Server(path, int(config["hookd"]["workers"]), Path(config["slurm"]["bin_dir"]))
    except OSError as e:
        raise SlurmYoloError(f"hookd: cannot listen on {path}: {e.strerror}") from None

    def stop(*_: object) -> None:  # shutdown() waits for serve_forever: not from its own thread
        threading.Thread(target=server.shutdown).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    reap_on_sigchld()
    print(f"slurm-yolo hookd: serving {path} as uid {os.geteuid()}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.5)
    finally:
        server.close()
