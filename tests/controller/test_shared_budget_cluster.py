"""Two clusters, one budget: the bundled 22.05 and 24.11 clusters, as ``deploy/minicluster up`` starts
them, keep their books in one MariaDB ledger. A deposit made through one cluster's config is the
balance through the other's, jobs on both draw from it, and submissions racing on both clusters for
the last tokens never take it below zero (each cluster's job_submit.lua asks the shared ledger,
which sees the other cluster's pending worst cases).

Every expected amount is worked out here from the prices this test's admin set (``conftest.PRICE``)
and each slurmdbd's own record of the run, read without slurm-yolo's parsers.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator

import pytest
from conftest import (
    PRICE,
    Slurm,
    balance_path,
    cluster_of_release,
    fund,
    last_movement,
    nothing_pending,
    poll,
)

pytestmark = pytest.mark.cluster
A100 = PRICE["a100"]
WORST = 60 * 1 * A100  # -t 1 on one a100 GPU: what admission reserves and the prolog holds


@pytest.fixture
def both() -> Iterator[tuple[Slurm, Slurm]]:
    """Both bundled clusters on one MariaDB ledger, priced as the tests' admin prices them, vision's
    jobs gone after."""
    old, new = cluster_of_release("22.05"), cluster_of_release("24.11")
    for slurm in (old, new):
        backend = slurm.config().ledger.backend
        if backend != "mariadb":
            pytest.skip(f"the {slurm.release} cluster keeps its own books (MINICLUSTER_LEDGER={backend})")
    assert old.config().ledger.mariadb_options != new.config().ledger.mariadb_options  # each its own file
    for partition, price in PRICE.items():  # one admin, one price list: set through either cluster
        old.cli("ledger", "price", "set", partition, str(price), "--reason", "tests")
    old.cli("ledger", "tiers", "normal", "1")
    nothing_pending(old, "vision")
    nothing_pending(new, "vision")
    yield old, new
    for slurm in (old, new):
        slurm.cmd("scancel", "-A", "vision", check=False)
    fund(old, ("vision",), 10**15)
    with new.ledger() as lg:
        assert lg.check() == []


def balance(slurm: Slurm) -> int:
    """vision's balance as ``ledger balance --json`` shows it through this cluster's config."""
    [row] = json.loads(slurm.cli("ledger", "balance", "vision", "--json").stdout)
    assert row["name"] == "vision"
    return int(row["balance"])


def submit(slurm: Slurm, seconds: int = 2) -> subprocess.CompletedProcess[str]:
    return slurm.cmd(
        "sbatch",
        "--parsable",
        "-o",
        "/dev/null",
        "-A",
        "vision",
        "-p",
        "a100",
        "--gres=gpu:a100:1",
        "-t",
        "1",
        user="alice",
        input=f"#!/bin/bash\nsleep {seconds}\n",
        check=False,
    )


def test_a_deposit_through_one_cluster_is_the_balance_on_both_and_jobs_on_both_draw_from_it(
    both: tuple[Slurm, Slurm],
) -> None:
    old, new = both
    fund(new, ("vision",), 0)
    old.cli("ledger", "deposit", "vision", str(10 * WORST), "--reason", "one grant, two clusters")
    assert balance(old) == balance(new) == 10 * WORST
    jobs = {}
    for slurm in (old, new):
        res = submit(slurm)
        assert res.returncode == 0, res.stderr
        jobs[slurm.release] = int(res.stdout.strip().split(";")[0])
    charged = 0
    for slurm in (old, new):
        row = slurm.settled(jobs[slurm.release], timeout=240)[0]
        ran = int(slurm.ended(jobs[slurm.release])[0]["ElapsedRaw"])
        assert (row["cluster"], row["hold"], row["charge"]) == (slurm.name, WORST, ran * A100)
        charged += ran * A100
    assert balance(old) == balance(new) == 10 * WORST - charged


def test_twenty_submissions_racing_on_both_clusters_never_overdraw(both: tuple[Slurm, Slurm]) -> None:
    old, new = both
    fund(old, ("vision",), 4 * WORST + WORST // 2)  # four fit, with half a fifth to spare
    time.sleep(3)  # each script counts its own admissions of the last two seconds (the last test's too)
    before = last_movement(old, "vision")
    results: list[tuple[Slurm, subprocess.CompletedProcess[str]]] = []
    lock = threading.Lock()

    def racer(slurm: Slurm) -> None:
        res = submit(slurm, seconds=20)  # still pending or running while the others are asked
        with lock:
            results.append((slurm, res))

    threads = [threading.Thread(target=racer, args=(slurm,)) for slurm in (old, new) * 10]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    admitted = [(s, int(r.stdout.strip().split(";")[0])) for s, r in results if r.returncode == 0]
    refused = [r for _, r in results if r.returncode != 0]
    assert 1 <= len(admitted) <= 4 and len(refused) == 20 - len(admitted), [r.stderr for r in refused]
    assert all("account vision cannot cover this job" in r.stderr for r in refused), [r.stderr for r in refused]
    charged = 0
    for slurm, job in admitted:
        row = slurm.settled(job, timeout=300)[0]
        ran = int(slurm.ended(job)[0]["ElapsedRaw"])
        assert (row["hold"], row["charge"]) == (WORST, ran * A100)
        charged += ran * A100
    path = balance_path(old, "vision", before)  # what vision had beyond its holds after each movement
    assert min(path) >= 0
    assert balance(old) == balance(new) == 4 * WORST + WORST // 2 - charged

    def drained() -> bool:  # nothing of vision's pending on either cluster: no cluster counts any for it
        with old.ledger() as lg:
            return not [r for r in lg.commitments() if r["account"] == "vision"]

    poll("both clusters' commitments of vision gone", drained, timeout=60)
