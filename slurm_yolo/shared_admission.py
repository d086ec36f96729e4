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

import re
from typing import NamedTuple

from . import ledger
from .config import Config

EVENT = "admit"
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
    """The line the script reads: ``ok``, or ``refused BALANCE HERE ELSEWHERE`` (the numbers its
    message shows). A ledger that cannot decide raises (the caller answers ``error: ...``)."""
    with ledger.writer(config, publish=False) as lg:
        got = lg.admit(request.cluster, request.account, request.need, request.committed)
    if got.ok:
        return "ok\n"
    return f"refused {got.balance} {got.committed_here} {got.committed_elsewhere}\n"
