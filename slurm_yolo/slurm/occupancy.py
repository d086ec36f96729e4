"""Which finished jobs shared their nodes with other jobs while they ran (slurmdbd's record).

A run timed beside other jobs on its node (their data loaders on the same CPUs, the same PCIe and
memory bandwidth) measured a share of the node, not the node: ``calibrate`` weighs such a run down.
Two ``sacct`` calls whatever the number of jobs: their own runs (nodes, start, end), then every job
on those nodes in that span; node lists are expanded here. Every field read is slurmctld's (ids,
node names an admin made, times as epoch seconds), never a user's text.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import NamedTuple

from slurm_yolo.slurm import queries, run

FIELDS = ("JobIDRaw", "NodeList", "Start", "End")
_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")


def expand(hostlist: str) -> list[str]:
    """Slurm's compressed node list as names: ``gpu[01-03,07],login1`` -> gpu01, gpu02, gpu03, gpu07,
    login1 (several bracket groups in one name too). ``None Assigned`` and empty: none."""
    if not hostlist or hostlist.startswith("None"):
        return []
    items, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist):  # split on the commas outside brackets
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    items.append(hostlist[start:])
    return [name for item in items if item for name in _expand_one(item)]


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[: m.start()], item[m.end() :]
    out = []
    for part in m.group(1).split(","):
        r = _RANGE.match(part)
        if not r:
            raise ValueError(f"not a node range: {part!r}")
        low, high = r.group(1), r.group(2) or r.group(1)
        width = len(low) if low.startswith("0") else 0
        out += [f"{head}{n:0{width}d}{rest}" for n in range(int(low), int(high) + 1) for rest in _expand_one(tail)]
    return out


class Span(NamedTuple):
    job: int
    nodes: frozenset[str]
    start: int
    end: int  # epoch seconds; still running: now


def _spans(text: str, now: int) -> list[Span]:
    out = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < len(FIELDS):
            continue
        job, nodes, start, end = fields[: len(FIELDS)]
        try:
            begin = int(start)
            out.append(Span(int(job), frozenset(expand(nodes)), begin, int(end) if end.isdigit() else now))
        except ValueError:
            continue  # never started (Start=Unknown), or an array's pending line
    return [s for s in out if s.nodes and s.start > 0]


def shared(job_ids: list[int], bin_dir: Path | None = None, timeout: float = 60.0) -> dict[int, list[int]]:
    """For each of ``job_ids`` that ran (its last run): the other jobs that ran on one of its nodes at
    the same time, sorted. A job sacct does not know is left out of the answer."""
    if not job_ids:
        return {}
    now = int(time.time())
    argv = ["sacct", "-X", "-D", "-n", "-P", "-j", queries.job_list(job_ids), "-o", ",".join(FIELDS)]
    own: dict[int, Span] = {}
    for s in _spans(run(argv, bin_dir=bin_dir, time_format=queries.TIME_FORMAT, timeout=timeout).stdout, now):
        if s.job in job_ids:
            own[s.job] = s  # -D lists every run oldest first: the last one made the sample
    if not own:
        return {}
    nodes = sorted(set().union(*(s.nodes for s in own.values())))
    since, until = min(s.start for s in own.values()), max(s.end for s in own.values())
    window = [time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t)) for t in (since, until + 1)]
    argv = ["sacct", "-X", "-a", "-n", "-P", "-N", ",".join(nodes), "-S", window[0], "-E", window[1]]
    argv += ["-o", ",".join(FIELDS)]
    others = _spans(run(argv, bin_dir=bin_dir, time_format=queries.TIME_FORMAT, timeout=timeout).stdout, now)
    return {
        job: sorted(
            {
                o.job
                for o in others
                if o.job != job and o.nodes & span.nodes and o.start < span.end and o.end > span.start
            }
        )
        for job, span in own.items()
    }
