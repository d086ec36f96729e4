"""Pure parsers of Slurm command output for planning and reports (tested on recorded output and on the
real cluster). The money path reads ``records`` instead: ``scontrol show job`` prints user text
(Comment, WorkDir, StdOut) as ``Key=value`` like real fields, so nothing billed comes from here."""

from __future__ import annotations

import math
import re
import time
from typing import NamedTuple

from slurm_yolo.core import durations
from slurm_yolo.slurm import records

_KEY = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9/:_]*)=")


def scontrol_record(line: str) -> dict[str, str]:
    """One ``scontrol show -o`` record: ``Key=Value Key=Value ...`` (values may hold spaces)."""
    fields: dict[str, str] = {}
    matches = list(_KEY.finditer(line.strip()))
    text = line.strip()
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(text)
        fields[m.group(1)] = text[m.end() : end].strip()
    return fields


def parsable2(text: str, columns: list[str], trailing: bool = False) -> list[dict[str, str]]:
    """``--parsable2 --noheader`` rows (``|``-separated) as dicts; short rows are padded.

    ``trailing``: each line ends with one extra ``|`` (``-O Field:|`` output).
    """
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if trailing and line.endswith("|"):
            line = line[:-1]
        parts = line.split("|", len(columns) - 1)
        parts += [""] * (len(columns) - len(parts))
        rows.append(dict(zip(columns, parts, strict=True)))
    return rows


def delimited(text: str, width: int, delimiter: str) -> list[list[str]]:
    """Records of ``width`` fields from ``sacct -p --delimiter=D`` output (D after every field, a
    newline after every record), split on D alone: a field may hold newlines. A record is ``width``
    fields whose next field starts with the newline that ends it; where that is not so (a field that
    holds D itself, which only a saved file with a guessable D can have), the fields up to the next
    line are skipped, so a record that does not line up is dropped, never shifted into another. Text
    holding D and newlines that lines up as whole records of its own is read as them: only a D no
    user could have written (sacct's output here draws one at random) keeps them out."""
    tokens = text.split(delimiter)
    last = len(tokens) - 1  # what follows the final delimiter: the final newline
    records = []
    i = 0
    while i + width <= last:
        after = tokens[i + width]
        if after.startswith("\n") or (i + width == last and not after):
            records.append(tokens[i : i + width])
            tokens[i + width] = after[1:]
            i += width
            continue
        nxt = next((k for k in range(i + 1, last + 1) if "\n" in tokens[k]), None)
        if nxt is None:
            break
        tokens[nxt] = tokens[nxt].rsplit("\n", 1)[1]
        i = nxt
    return records


def private_data(config_text: str) -> frozenset[str]:
    """What ``PrivateData`` hides from users (lowercase: accounts, jobs, usage...), from ``scontrol show
    config`` (``PrivateData = accounts,usage``; ``none`` hides nothing)."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PrivateData":
            return frozenset(v.strip().lower() for v in value.split(",") if v.strip() and v.strip().lower() != "none")
    return frozenset()


class ControllerConfig(NamedTuple):
    """``scontrol show config``: when the controller answered (its own clock) and each value, a key
    Slurm prints per index (``PrologSlurmctld[0]``, 24.11) under its plain name, the first index."""

    as_of: float | None  # epoch seconds: "Configuration data as of ..." (local time, as Slurm prints it)
    values: dict[str, str]
    controllers: tuple[str, ...] = ()  # SlurmctldHost's names, primary first (``vm(127.0.0.1)`` -> vm)


def controller_config(text: str) -> ControllerConfig:
    as_of = None
    values: dict[str, str] = {}
    controllers: list[str] = []
    for line in text.splitlines():
        if line.startswith("Configuration data as of "):
            try:
                as_of = time.mktime(
                    time.strptime(line.removeprefix("Configuration data as of ").strip(), "%Y-%m-%dT%H:%M:%S")
                )
            except ValueError:
                as_of = None
            continue
        key, sep, value = line.partition("=")
        if sep:
            name = re.sub(r"\[\d+\]$", "", key.strip())
            values.setdefault(name, value.strip())
            if name == "SlurmctldHost":
                controllers.append(value.strip().split("(")[0])
    return ControllerConfig(as_of, values, tuple(controllers))


def admin_level_and_coordinated(text: str) -> tuple[str, frozenset[str]]:
    """A user's AdminLevel and the accounts they coordinate, from ``sacctmgr -n -P show user NAME withcoord
    format=AdminLevel,Coordinators`` (``None|a,b``; no line for a user slurmdbd does not know)."""
    line = next((ln for ln in text.splitlines() if ln.strip()), "None|")
    level, _, accounts = line.partition("|")
    return level.strip() or "None", frozenset(a.strip() for a in accounts.split(",") if a.strip())


def duration(text: str) -> int | None:
    """A Slurm duration as seconds (``records.duration``, through ``durations.slurm``, the one parser
    of them), for planning and reports: None for UNLIMITED and for anything it cannot read."""
    try:
        return records.duration(text.strip())
    except ValueError:
        return None


def minutes_arg(seconds: float) -> str:
    """A time limit for ``--time`` in whole minutes (Slurm's granularity), rounded up."""
    return str(max(1, -(-int(seconds) // 60)))


def partition_time_limit(sinfo_text: str) -> int | None:
    """A partition's MaxTime from ``sinfo -h -p P -o %l`` (``infinite``, ``30:00``, ``1-00:00:00``), in
    seconds; None without a limit. ValueError for anything else, or for several partitions' lines."""
    values = {line.strip() for line in sinfo_text.splitlines() if line.strip()}
    if len(values) != 1:
        raise ValueError(f"not one partition's time limit: {sorted(values)[:3]}")
    value = values.pop()
    return None if value.upper() in durations.UNLIMITED else durations.slurm(value)


def cluster_name(config_text: str) -> str:
    """The ClusterName in ``scontrol show config`` output: the cluster these commands talk to (one
    slurmdbd may serve several, so accounting changes must name it)."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "ClusterName" and value.strip():
            return value.strip()
    raise ValueError("scontrol show config printed no ClusterName")


def tres(text: str) -> dict[str, int]:
    """A TRES list as sacctmgr prints it (``cpu=1000,gres/gpu=50000``; empty: no limit) as a dict."""
    limits: dict[str, int] = {}
    for item in text.strip().split(","):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name or not value.isdigit():
            raise ValueError(f"TRES list not understood: {text.strip()[:200]!r}")
        limits[name] = int(value)
    return limits


# sacct's units on a memory TRES (``gres/gpumem=21794M``): powers of 1024 of a byte, none: bytes
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "P": 1 << 50}
_TRES_AMOUNT = re.compile(r"([0-9]{1,18}(?:\.[0-9]{1,6})?)([KMGTP]?)")


MAX_GPUUTIL = 100.0 * 64  # a percent per GPU, over at most a node's GPUs: more is not a figure


class StepGpu(NamedTuple):
    """What Slurm's own GPU accounting (``gres/gpuutil``, ``gres/gpumem``: a site's
    AccountingStorageTRES with the NVML GPU plugin) recorded for one job step, where it did."""

    util_pct: float | None  # TRESUsageInAve's gres/gpuutil: the step's mean utilisation, percent (one GPU's)
    mem_gb: float | None  # TRESUsageInMax's gres/gpumem: its peak GPU memory, GiB


def _tres_item(text: str, key: str) -> str | None:
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if sep and name.strip() == key:
            return value.strip()
    return None


def step_gpu(usage_ave: str, usage_max: str) -> StepGpu | None:
    """A step's GPU figures from sacct's ``TRESUsageInAve`` and ``TRESUsageInMax``
    (``...,gres/gpumem=21794M,gres/gpuutil=43,...``); None where Slurm recorded neither (no GPU
    accounting at the site, or a step without GPUs). A figure out of its range is dropped."""
    util = mem = None
    if (value := _tres_item(usage_ave, "gres/gpuutil")) is not None and (m := _TRES_AMOUNT.fullmatch(value)):
        util = float(m.group(1)) if not m.group(2) and float(m.group(1)) <= MAX_GPUUTIL else None
    if (value := _tres_item(usage_max, "gres/gpumem")) is not None and (m := _TRES_AMOUNT.fullmatch(value)):
        mem = float(m.group(1)) * _UNITS[m.group(2)] / (1 << 30)
    return None if util is None and mem is None else StepGpu(util, mem)


def format_tres(limits: dict[str, int]) -> str:
    """A TRES list for sacctmgr, in the dict's order (-1 clears a limit when setting one)."""
    return ",".join(f"{name}={value}" for name, value in limits.items())


ASSOC_FIELDS = ["Cluster", "Account", "User", "Partition", "GrpTRESRunMins"]


def account_run_mins(text: str, cluster: str) -> dict[str, dict[str, int]]:
    """Each account's own association on ``cluster`` (the one without a user, which limits all of the
    account's users together), from ``sacctmgr -n -P show assoc format=ASSOC_FIELDS``: its GrpTRESRunMins."""
    return {
        row["Account"]: tres(row["GrpTRESRunMins"])
        for row in parsable2(text, ASSOC_FIELDS)
        if row["Cluster"] == cluster and not row["User"] and not row["Partition"]
    }


def sbatch_job_id(text: str) -> int:
    """The job id of ``sbatch --parsable`` output (``123`` or ``123;cluster``)."""
    first = text.strip().splitlines()[-1] if text.strip() else ""
    head = first.split(";")[0]
    if not head.isdigit():
        raise ValueError(f"sbatch printed no job id: {text.strip()[:200]!r}")
    return int(head)


def default_partition(text: str) -> str | None:
    """The partition sbatch uses when a job names none: the one marked ``Default=YES`` in ``scontrol
    --all --oneliner show partition`` (one ``Key=value`` line per partition; admin-set fields only)."""
    for line in text.splitlines():
        fields = scontrol_record(line)
        if fields.get("Default") == "YES" and fields.get("PartitionName"):
            return fields["PartitionName"]
    return None


class WillRun(NamedTuple):
    """slurmctld's answer to ``sbatch --test-only`` for one job script: when its scheduler expects the
    job to start (epoch seconds), or why it would not take the job (``refused``)."""

    start: int | None
    refused: str = ""


# 26.05 prints a stray "a" before "using" (src/api/allocate.c: "to start at %s%s%s a using")
_WILL_RUN = re.compile(r"^\S+: Job \d+ to start at (\d+) (?:on cluster \S+ )?(?:a )?using \d+ processors", re.MULTILINE)


def will_run_start(stderr: str) -> int:
    """The expected start, in epoch seconds, from what ``sbatch --test-only`` prints on stderr when
    run with ``SLURM_TIME_FORMAT=%s``, alike in 22.05 and 24.11: ``sbatch: Job 41 to start at
    1796068800 using 1 processors on nodes gpu-t4-1 in partition t4`` (``on cluster C`` after the
    time when several clusters were asked; 26.05 adds ``a`` before ``using``). A time Slurm cannot
    tell (``Unknown``) is an error."""
    m = _WILL_RUN.search(stderr)
    if not m:
        raise ValueError(f"sbatch --test-only printed no start time: {stderr.strip()[-200:]!r}")
    return int(m.group(1))


class NodeShape(NamedTuple):
    """What a partition's smallest GPU node offers each GPU (``sinfo``'s node records): a job asking more
    than a node has per GPU pends for ever (``PartitionConfig``)."""

    cpus_per_gpu: int
    memory_gb_per_gpu: float  # RealMemory over GPUs (0: Slurm keeps no memory figure)
    threads_per_core: int  # Slurm CPUs per core: a hyperthread is one Slurm CPU
    cpus: int  # of that node
    gpus: int


_GPU_GRES = re.compile(r"(?:^|,)gpu(?::[^:,(]+)?:(\d+)")
NODE_FORMAT = "%R|%N|%c|%m|%Z|%G"  # partition, node, CPUs, RealMemory (MB), threads per core, GRES


_TYPED_GPU = re.compile(r"(?:^|,)gpu:([^:,]+):\d+")
_SHARDS = re.compile(r"(?:^|,)shard(?::[^:,]+)?:(\d+)")


def partition_nodes(text: str) -> list[dict[str, object]]:
    """Each GPU partition as ``deploy/replaycluster`` takes one (``slurm-yolo simulate --spec``): its
    card, how many nodes, and its smallest node's GPUs, shards per GPU, CPUs and memory, from ``sinfo
    -h -N -a -o NODE_FORMAT``, in sinfo's order (the first the default, as there)."""
    nodes: dict[str, dict[str, tuple[int, int, int, str, int]]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        partition, node, cpus, memory, _threads, gres = parts
        clean = re.sub(r"\([^)]*\)", "", gres)
        gpus = sum(int(m.group(1)) for m in _GPU_GRES.finditer(clean))
        mem = re.match(r"\d+", memory)
        if gpus <= 0 or not cpus.isdigit() or int(cpus) <= 0 or not mem:
            continue
        typed, shards = _TYPED_GPU.search(clean), _SHARDS.search(clean)
        card = typed.group(1) if typed else "gpu"
        nodes.setdefault(partition.rstrip("*"), {})[node] = (
            gpus,
            int(cpus),
            int(mem.group(0)),
            card,
            int(shards.group(1)) // gpus if shards else 0,
        )
    out: list[dict[str, object]] = []
    for name, members in nodes.items():
        smallest = min(members.values())
        out.append(
            {
                "name": name,
                "gpu_type": smallest[3],
                "nodes": len(members),
                "gpus_per_node": smallest[0],
                "cpus_per_node": smallest[1],
                "memory_mb": smallest[2],
                "shards_per_gpu": smallest[4],
            }
        )
    return out


def node_shapes(text: str) -> dict[str, NodeShape]:
    """Per partition, the shape of its node with the fewest CPUs per GPU, from ``sinfo -h -N -a -o
    NODE_FORMAT`` (a node once per partition it is in). GRES print as ``gpu:a100:2,shard:a100:8`` and
    may carry a socket binding (``gpu:a100:2(S:0-1)``); nodes without GPUs are skipped."""
    nodes: dict[str, list[NodeShape]] = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 6:
            continue
        partition, _node, cpus, memory, threads, gres = parts
        gpus = sum(int(m.group(1)) for m in _GPU_GRES.finditer(re.sub(r"\([^)]*\)", "", gres)))
        try:
            n_cpus, mem_mb = int(cpus), float(memory)
        except ValueError:
            continue
        if gpus <= 0 or n_cpus <= 0:
            continue
        tpc = int(threads) if threads.isdigit() and int(threads) > 0 else 1
        shape = NodeShape(n_cpus // gpus, math.floor(mem_mb / 1024 / gpus * 100) / 100, tpc, n_cpus, gpus)  # never more
        nodes.setdefault(partition.rstrip("*"), []).append(shape)
    return {
        name: min(shapes, key=lambda n: (n.cpus_per_gpu, n.memory_gb_per_gpu))._replace(
            threads_per_core=max(n.threads_per_core for n in shapes)
        )
        for name, shapes in nodes.items()
    }
