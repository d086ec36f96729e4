"""What each account can still commit, published for slurmctld's native admission (``job_submit.lua``).

Admission has to run inside slurmctld (the only place every ``sbatch``, ``srun`` and ``salloc`` passes
through, one at a time) and must cost little there, so it reads no database: the ledger writes a small
text file after each of its writers commits, and the Lua script reads it on every GPU submission.

The file holds, as of its ``stamp``, in whole numbers: each account's balance (holds already taken
out) with its quota's capacity and refill per day, how long a job may wait for credits, the price versions of each partition (the one in effect and those scheduled after it), each QOS
tier's rate in parts per million, the hold of a run without a time limit, shards per GPU, and the
partitions and accounts the site exempts (admitted without a budget check, as the prolog holds nothing). The
script multiplies them as ``policy.tokens`` does, exactly and rounded up once. The script subtracts what slurmctld's own job list still commits (pending GPU jobs,
and runs started after ``stamp`` that no hold covers yet), so 20 submissions racing for the last tokens
are admitted one at a time against one number.

Writers take turns on the ledger's publishing lock (in its private folder) and each writes what the
ledger holds once it has the lock, so the file left behind is never older than the last commit. Names that could break a line (anything but letters,
digits, ``_ . -``) are left out: such an account, partition or QOS is priced as unknown (no balance,
the default price, rate 1).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_yolo.core import durations
from slurm_yolo.core.billing import bucket, policy
from slurm_yolo.core.config import NAME, Config
from slurm_yolo.core.errors import UsageError
from slurm_yolo.state import db

FILE_NAME = "availability"
REFUSALS_NAME = "refusals.log"  # appended by the Lua script (as the SlurmUser), read by ``alerts``
VERSION = 4  # 3: rates in parts per million (whole numbers, like every other number here); 4: quotas, credit wait
_NAME = NAME  # what the config takes as a name is what may go on a line here
_PATH = re.compile(r"/[^\x00-\x1f\x7f\"'\\]*")  # also no ': the hook client's path goes into a shell word


def path(config: Config) -> Path:
    return config.public_dir / FILE_NAME


def refusals_path(config: Config) -> Path:
    """Appended by slurmctld (the SlurmUser) alone: in the private folder, out of users' reach."""
    return db.private_dir(config.state_dir) / REFUSALS_NAME


PriceKey = tuple[str, str]  # (cluster, partition); cluster '': every cluster without prices of its own


def price_versions(prices: Iterable[Any], now: float) -> dict[PriceKey, list[tuple[int, int]]]:
    """Per (cluster, partition), (effective_at, price) of the version in effect at ``now`` and of each
    version scheduled after it (rows of the ledger's prices table): the script picks the one in
    effect when it runs, as the prolog will when the job starts."""
    current: dict[PriceKey, tuple[float, int, int]] = {}
    later: dict[PriceKey, list[tuple[int, int]]] = {}
    for row in prices:
        key, at, price = (str(row["cluster"]), str(row["partition"])), float(row["effective_at"]), int(row["price"])
        if at > now:
            later.setdefault(key, []).append((int(at) + 1, price))  # whole seconds, never early
        elif key not in current or (at, int(row["id"])) >= current[key][:2]:
            current[key] = (at, int(row["id"]), price)
    return {
        key: sorted(([(0, current[key][2])] if key in current else []) + later.get(key, []))
        for key in current.keys() | later.keys()
    }


def _plain(*names: str) -> bool:
    """Names that cannot break a line; a cluster may be '' (every cluster)."""
    return all(_NAME.fullmatch(n) for n in names[:1]) and all(n == "" or _NAME.fullmatch(n) for n in names[1:])


def render(
    config: Config,
    now: float,
    accounts: Iterable[Any],
    prices: Iterable[Any],
    tiers: Iterable[Any],
    held: Iterable[tuple[str, int]],
) -> str:
    """The file's text (pure) from the ledger's accounts, prices and tiers rows, and the (cluster, job
    id) of every run it holds now. A price or rate of one cluster of a shared ledger ends with that
    cluster's name; the script of that cluster prefers it to the one of every cluster."""
    led = config.ledger
    lines = [
        f"slurm-yolo-availability {VERSION}",
        f"stamp {int(now)}",
        f"unlimited {policy.unlimited_cap(led.unlimited_hold_hours)}",
        f"default_price {led.default_price}",
    ]
    rates = {(str(row["qos"]), str(row["cluster"])): int(row["rate_ppm"]) for row in tiers}
    if led.backend == "mariadb":
        lines.append("shared 1")  # several clusters may share it: the script asks the ledger too
    lines.append(f"maxrate {max([policy.RATE_SCALE, *rates.values()])}")
    lines.append(f"creditwait {int(led.credit_wait_minutes * 60)}")
    for (cluster, name), versions in sorted(price_versions(prices, now).items()):
        if _plain(name, cluster):
            lines += [f"price {name} {price} {at} {cluster}".rstrip() for at, price in versions]
    lines += [f"rate {q} {r} {c}".rstrip() for (q, c), r in sorted(rates.items()) if _plain(q, c)]
    lines += [f"exempt partition {name}" for name in led.exempt_partitions if _NAME.fullmatch(name)]
    lines += [f"exempt account {name.lower()}" for name in led.exempt_accounts if _NAME.fullmatch(name)]
    lines += [f"shards {p.name} {p.shards_per_gpu}" for p in config.partitions.values() if _NAME.fullmatch(p.name)]
    lines += [f"gpus {p.name} {p.gpus_per_node}" for p in config.partitions.values() if _NAME.fullmatch(p.name)]
    lines += [
        f"account {a['name']} {int(a['balance'])} {int(a['capacity'])} {int(a['rate_per_day'])}"
        for a in accounts
        if _NAME.fullmatch(str(a["name"]))
    ]
    lines += [f"held {cluster} {int(job)}" for cluster, job in sorted(set(held)) if _NAME.fullmatch(cluster)]
    return "\n".join(lines) + "\n"


def publish(config: Config, text: Callable[[float], str]) -> None:
    """Rewrite the file (atomically: the script reads either the old or the new) with ``text(now)``;
    the caller holds the ledger's publishing lock, so the file left behind is never the older."""
    target = db.public_folder(config.public_dir) / FILE_NAME
    body = text(time.time())
    tmp = target.with_name(f".{FILE_NAME}.{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(body)
    tmp.chmod(0o644)
    os.replace(tmp, target)


LUA_MODULES = ("bigint.lua", "policy.lua", "state.lua", "modify.lua")  # in this order, into the entry


def lua_source(name: str) -> str:
    """One of the admission script's Lua sources (``job_submit.lua`` or a module), read from the
    package data ``slurm_yolo/data/job_submit/`` so the wheel carries them and no layer reads a role's
    folder; the tests read them here too."""
    return (resources.files("slurm_yolo") / "data" / "job_submit" / name).read_text(encoding="utf-8")


def script(config: Config, cluster: str) -> str:
    """The job_submit.lua text for this config and cluster (its ClusterName: the runs of its jobs the
    ledger holds): where to read balances and to note refusals, and the SlurmUser's uid (who may still
    change a pending job's resources)."""
    import pwd

    owner = config.paths.owner
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise UsageError(f"paths.owner {owner!r} is not a user on this host") from None
    if not _NAME.fullmatch(cluster):
        raise UsageError(f"cluster name {cluster!r} is not a plain name")
    client, socket = config.hookd.client, config.hookd.socket
    for p in (path(config), refusals_path(config), client, socket):
        if not _PATH.fullmatch(str(p)):
            raise UsageError(f"{p}: a path with quotes, backslashes or control characters cannot go into Lua")
    entry = lua_source("job_submit.lua")
    modules = "\n".join(lua_source(name) for name in LUA_MODULES)
    return (
        entry.replace("--@MODULES@\n", modules)
        .replace("@MAX_LIMIT_SECONDS@", str(durations.YEAR))
        .replace("@COVER_MARGIN_SECONDS@", str(bucket.COVER_MARGIN_SECONDS))
        .replace("@AVAILABILITY@", str(path(config)))
        .replace("@REFUSALS@", str(refusals_path(config)))
        .replace("@SLURM_UID@", str(uid))
        .replace("@CLUSTER@", cluster)
        .replace("@HOOK_CLIENT@", str(client))
        .replace("@HOOKD_SOCKET@", str(socket))
    )
