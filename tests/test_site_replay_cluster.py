"""The site replay's tiny form (``python -m bench site tiny``): three jobs, the habits arm and the
slurm-yolo arm at once, each on a replay cluster of its own, Slurm's own scheduler deciding who runs.
Every job of every arm reaches an end state, and the figures add up against sacct's own records,
reckoned here apart from the bench's code: GPU-hours allocated, tokens at the scenario's prices, and
makespan. The slurm-yolo arm's cluster runs the product's hooks on books of its own: every run is
held and settled once (the books' proof and ``ledger audit`` clean, nothing left held), and its
ledger charged exactly what each run's sacct record costs at the partition's price (a TIMEOUT at
least its limit), worked out here in whole tokens."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import MARKERS, _missing

pytestmark = pytest.mark.cluster


def sacct_rows(cluster: str, since: float) -> list[dict[str, str]]:
    bin_dir = Path(f"/var/lib/slurm-yolo-cluster/replay-{cluster}/bin")
    fields = "JobName,Partition,Submit,End,ElapsedRaw,TimelimitRaw,State,AllocTRES"
    out = subprocess.run(
        [
            str(bin_dir / "sacct"),
            "-M",
            cluster,
            "-X",
            "-D",
            "-n",
            "-P",
            "-S",
            time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 5)),
            "-o",
            fields,
        ],
        env={**os.environ, "SLURM_TIME_FORMAT": "%s"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [dict(zip(fields.split(","), line.split("|"), strict=True)) for line in out.splitlines() if line.strip()]


def billed(row: dict[str, str], prices: dict[str, float], scale: float) -> int:
    """What one run pays, in whole tokens: its seconds (a TIMEOUT's at least its limit) x its GPUs (a
    shard a quarter of one) x the partition's price per real second (the scenario's per simulated
    second x the scale), rounded up."""
    tres = dict(p.split("=", 1) for p in row["AllocTRES"].split(",") if "=" in p)
    seconds = int(row["ElapsedRaw"])
    if row["State"] == "TIMEOUT":
        seconds = max(seconds, int(row["TimelimitRaw"]) * 60)
    price = round(prices[row["Partition"]] * scale)
    if "gres/gpu" in tres:
        return seconds * int(tres["gres/gpu"]) * price
    return -(-seconds * int(tres.get("gres/shard", 0)) * price // 4)


def test_the_tiny_replay_ends_every_job_and_its_figures_add_up(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not (MARKERS / "22.05.json").is_file():
        _missing("the replay needs root and the bundled 22.05 cluster's slurmdbd (deploy/minicluster up 22.05)")
    from bench import site, site_workload

    scenario = site_workload.load("tiny")
    arms = ["habits", "slurm-yolo"]
    clusters = [site.Cluster(arm, i, scenario) for i, arm in enumerate(arms)]
    try:
        report = site.replay("tiny", arms, tmp_path / "tiny.png", keep=True)
        assert (tmp_path / "tiny.png").stat().st_size > 1000
        names = {j.name for j in scenario.jobs}
        for arm, cluster in report["clusters"].items():
            figures = report["arms"][arm]
            assert figures["errors"] == [] and figures["jobs"] == len(names), (arm, figures)
            rows = [r for r in sacct_rows(cluster, report["t0"]) if r["JobName"] in names]
            assert {r["JobName"] for r in rows} == names
            final = {r["JobName"]: r["State"] for r in sorted(rows, key=lambda r: float(r["End"]))}
            assert set(final.values()) <= {"COMPLETED", "TIMEOUT", "FAILED", "CANCELLED"}, final
            gpu_seconds, tokens = 0.0, 0.0
            for r in rows:
                tres = dict(p.split("=", 1) for p in r["AllocTRES"].split(",") if "=" in p)
                gpus = float(tres.get("gres/gpu", 0)) or float(tres.get("gres/shard", 0)) / 4
                gpu_seconds += int(r["ElapsedRaw"]) * gpus * scenario.scale
                tokens += int(r["ElapsedRaw"]) * gpus * scenario.scale * scenario.prices[r["Partition"]]
            assert figures["gpu_hours_allocated"] == pytest.approx(gpu_seconds / 3600)
            if arm == "habits":  # no product: the ledger's rule on sacct's records
                assert figures["tokens_charged"] == round(tokens)
            else:
                assert figures["ledger_check"] and figures["ledger_audit"] == "", {
                    k: figures[k] for k in ("ledger_check", "ledger_audit", "ledger_held")
                }
                assert figures["ledger_held"] == 0
                assert figures["tokens_charged"] == sum(billed(r, scenario.prices, scenario.scale) for r in rows)
            first = min(float(r["Submit"]) for r in rows)
            last = max(float(r["End"]) for r in rows)
            assert figures["makespan_s"] == pytest.approx((last - first) * scenario.scale)
            assert 0 < figures["gpu_hours_busy"] <= figures["gpu_hours_allocated"] + 1e-9
            # during the burst (until the last job started: with hooks' starts, a GPU may not have begun
            # training by then) and over the makespan
            assert 0 <= figures["utilisation"] <= 1 and 0 < figures["utilisation_makespan"] <= 1, arm
    finally:
        for c in clusters:
            c.down()
