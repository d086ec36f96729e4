"""Admission across the clusters of one shared ledger: each cluster's job_submit.lua asks here.

A cluster's job_submit.lua sees its own slurmctld's job list and the balances its ledger publishes.
When several clusters share one (MariaDB) ledger, that is not enough: two clusters admitting the last
tokens of one account in the same second would both say yes, and the second hold would overdraw it.
So on a shared ledger the script asks its hookd (through the hook
client, ``slurm-yolo-hook admit``), which decides in one ledger turn with every other cluster's
admissions (``Ledger.admit``): the balance against this cluster's pending worst cases, the other
clusters' and the new job's. No answer is a refusal: an unknown budget is not an unlimited one.

The request comes from root or the SlurmUser only (hookd checks the peer), and still is parsed as
strictly as anything else: names as Slurm could ever make them, amounts as whole numbers.
"""

from __future__ import annotations

import math
import re
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import NamedTuple

from slurm_yolo.core.config import Config
from slurm_yolo.core.errors import SlurmYoloError
from slurm_yolo.state import ledger

EVENT = "admit"
ANSWER_SECONDS = 5.0  # the hook client gives up at 8 s (spank/yolo_hook.c)
COOL_DOWN_SECONDS = 10.0
MAX_AMOUNT = 10**30  # far past any balance; the ledger's columns are 64-bit, the check is in Python
_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,190}")
_AMOUNT = re.compile(r"[0-9]{1,31}")


class Request(NamedTuple):
    cluster: str
    account: str
    need: int
    committed: dict[str, int]  # the asking cluster's pending worst cases, per account


def _amount(text: str) -> int:
    if not _AMOUNT.fullmatch(text) or int(text) > MAX_AMOUNT:
        raise ValueError(f"not an amount: {text[:40]!r}")
    return int(text)


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise ValueError(f"not a name: {text[:40]!r}")
    return text


def parse(fields: list[str]) -> Request:
    """``CLUSTER ACCOUNT NEED [ACCOUNT=TOKENS ...]`` (the client's arguments after ``admit``)."""
    if len(fields) < 3:
        raise ValueError("admit needs CLUSTER ACCOUNT NEED [ACCOUNT=TOKENS ...]")
    committed: dict[str, int] = {}
    for item in fields[3:]:
        name, sep, tokens = item.partition("=")
        if not sep or _name(name) in committed:
            raise ValueError(f"not ACCOUNT=TOKENS once per account: {item[:40]!r}")
        committed[name] = _amount(tokens)
    return Request(_name(fields[0]), _name(fields[1]), _amount(fields[2]), committed)


def answer(config: Config, request: Request) -> str:
    """The line the script reads: ``ok``; ``wait SECONDS`` (the account's refill covers the job then,
    within ``ledger.credit_wait_minutes``); or ``refused BALANCE HERE ELSEWHERE`` (the numbers its
    message shows). A ledger that cannot decide raises (the caller answers ``error: ...``)."""
    max_wait = float(config.ledger.credit_wait_minutes) * 60
    with ledger.writer(config, publish=False) as lg:
        got = lg.admit(request.cluster, request.account, request.need, request.committed, max_wait)
    if got.ok:
        return "ok\n"
    if got.wait > 0:
        return f"wait {math.ceil(got.wait)}\n"
    return f"refused {got.balance} {got.committed_here} {got.committed_elsewhere}\n"


class Answers:
    """hookd's answers, each within ``ANSWER_SECONDS``: slurmctld waits for one with its job lock held,
    so every other request to it waits too. A ledger that did not answer in time a moment ago is not
    asked again for ``COOL_DOWN_SECONDS``: the GPU submissions meanwhile are refused at once (fail
    closed) rather than each stalling slurmctld. A question that fails fast trips nothing (one user's
    odd question must not refuse everyone's jobs). A question still running when its answer is given up on may
    yet count its job at the ledger: stale upward, until its cluster's hookd sees nothing pending."""

    def __init__(self, config: Config) -> None:
        self._config = config
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="admit")
        self._down_until = 0.0
        self._why = ""

    def ask(self, request: Request) -> str:
        if time.monotonic() < self._down_until:
            return f"error: the ledger was slow to answer moments ago ({self._why}); GPU jobs are refused until it answers\n"
        try:
            return self._pool.submit(answer, self._config, request).result(timeout=ANSWER_SECONDS)
        except FutureTimeout:  # only a wait trips the pause: one question's own failure is its own refusal
            self._why = f"no answer within {ANSWER_SECONDS:.0f} s"
            self._down_until = time.monotonic() + COOL_DOWN_SECONDS
            return f"error: {self._why}\n"
        except SlurmYoloError as e:
            return f"error: {str(e).splitlines()[0][:200]}\n"
