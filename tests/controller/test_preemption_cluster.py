"""Tiers that preempt, on the real bundled clusters (Slurm 22.05 and 24.11), with real training.

deploy/minicluster lets a yolo-prod job preempt yolo-explore ones (PreemptMode=requeue on yolo-explore,
with a GraceTime). alice trains in yolo-explore, then takes its GPUs with a yolo-prod job of her own:
her training hands them over at its next saved epoch, requeues, resumes from that checkpoint and
completes. Every run pays the time it ran (``billing.policy.charge``): she gains nothing from
preempting her own work. The expected tokens come from sacct's own records of each run and the
price this test's admin set, not from the code; the report counts the preemption under its tier.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest
from conftest import FONT, PRICE, VENV_BIN, Slurm, nothing_pending, poll, set_test_prices, skip_requeue_delay

from slurm_yolo.core.synthetic import make_dataset

pytestmark = [pytest.mark.cluster, pytest.mark.train]
USERS_FS = Path("/tmp/slurm-yolo-users")
A100 = PRICE["a100"]
# Epochs take about half a second here: prod is submitted at epoch 2, and Slurm's preemption took up
# to 5 s on a loaded CI host (24.11), so the run must have far more than ten epochs left by then.
EPOCHS = 30


@pytest.fixture
def home(slurm: Slurm) -> Iterator[Path]:
    """alice's folder on the users' file system (this host and the 24.11 root see it): her dataset,
    her ultralytics config (a font: nothing is downloaded) and her runs."""
    assert (USERS_FS / ".users-fs").is_file(), "deploy/minicluster up makes the users' file system"
    folder = Path(tempfile.mkdtemp(dir=USERS_FS))
    make_dataset(folder / "ds", train=16, val=8, size=96)  # ds/data.yaml
    (folder / "cfg" / "Ultralytics").mkdir(parents=True)
    if FONT:
        shutil.copyfile(FONT, folder / "cfg" / "Ultralytics" / "Arial.ttf")
    subprocess.run(["chown", "-R", "alice:alice", str(folder)], check=True)
    set_test_prices(slurm)
    nothing_pending(slurm, "vision")
    yield folder
    slurm.cmd("scancel", "-A", "vision", check=False)
    shutil.rmtree(folder, ignore_errors=True)


def yolo_sbatch(slurm: Slurm, home: Path, *args: str) -> dict:
    """alice's ``yolo-sbatch --json ARGS`` from her folder, where she runs it: on this host, as her, for
    22.05; for 24.11 this host is the login node too (its wrappers run Slurm's commands in the root as
    her)."""
    argv = [str(VENV_BIN / "yolo-sbatch"), "--json", *args]
    if slurm.root == Path("/"):
        argv = ["/usr/sbin/runuser", "-u", "alice", "--", *argv]
    env = slurm.env("alice") | {"YOLO_CONFIG_DIR": str(home / "cfg"), "YOLO_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=home, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def records(home: Path, job: int) -> list[dict]:
    path = home / f"yolo-usage-{job}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_prod_preempts_explore_which_resumes_from_its_checkpoint_and_pays_what_it_ran(slurm: Slurm, home: Path) -> None:
    words = [
        "train",
        "model=yolov8n.yaml",
        f"data={home / 'ds' / 'data.yaml'}",
        f"epochs={EPOCHS}",
        "imgsz=64",
        "batch=8",
        "workers=0",
        f"project={home}/runs",
        "name=ex",
        "exist_ok=True",
    ]
    started = int(time.time()) - 1
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(started))

    def ended(job: int, count: int = 1) -> list[dict[str, str]]:
        """sacct's records of the job's runs since this test began (a controller that lost its state
        gives job ids again: an older job's records share the id), once ``count`` have ended."""

        def fresh() -> list[dict[str, str]] | None:
            rows = [r for r in slurm.sacct(job) if r["Submit"] >= since]
            done = [
                r
                for r in rows
                if r["End"] not in ("Unknown", "")
                and r["State"].split(" ")[0] not in ("PENDING", "RUNNING", "COMPLETING")
            ]
            return rows if len(done) >= count else None

        return poll(f"job {job}: {count} run(s) ended", fresh, 600)

    explore = int(yolo_sbatch(slurm, home, "-p", "a100", "--priority", "explore", "-J", "explore", *words)["job_id"])
    poll(
        "epoch 2 of the explore run",
        lambda: any(r.get("kind") == "epoch" and r["epoch"] >= 2 for r in records(home, explore)),
        timeout=300,
    )
    # alice's own production job needs both a100 GPUs: Slurm preempts her explore run for it
    prod = slurm.sbatch(
        "-A", "vision", "-p", "a100", "--qos=yolo-prod", "--gres=gpu:a100:2", "-t", "2", script="sleep 5", user="alice"
    )

    def handed_over() -> bool:
        kinds = [r.get("kind") for r in records(home, explore)]
        assert "end" not in kinds, f"the explore run ended before Slurm preempted it: {kinds}"
        return "requeue" in kinds

    poll("the explore run's requeue", handed_over, 180)
    requeue = next(r for r in records(home, explore) if r["kind"] == "requeue")
    assert requeue["why"] == "preempted" and requeue["restart"] == 0
    assert ended(prod)[0]["State"] == "COMPLETED"
    skip_requeue_delay(explore, slurm)
    ended(explore, 2)

    # It resumed from the checkpoint it saved when preempted: every epoch once, none lost or redone.
    recs = records(home, explore)
    epochs = [r for r in recs if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == list(range(1, EPOCHS + 1))
    assert max(r["epoch"] for r in epochs if r["restart"] == 0) == requeue["epoch"]
    saved = next(r for r in recs if r["kind"] == "checkpoint" and r["epoch"] == requeue["epoch"] and r["restart"] == 0)
    assert next(r for r in recs if r["kind"] == "resume")["from"] == saved["last"]
    assert [(r["kind"], r["restart"]) for r in recs if r["kind"] == "end"] == [("end", 1)]

    # Billing: each run holds its limit and pays the seconds it ran on its GPUs (the preempted one
    # too, grace time included), so alice's account lost exactly what the three runs ran.
    runs = ended(explore, 2) + ended(prod)
    # Handed over in the grace: 22.05 records the run its launcher requeued REQUEUED; 24.11 requeues a
    # preempted job that ends in its grace by itself, and records it PREEMPTED.
    handed = "REQUEUED" if slurm.release == "22.05" else "PREEMPTED"
    assert [r["State"].split(" ")[0] for r in runs] == [handed, "COMPLETED", "COMPLETED"]

    def settled_runs(job: int, count: int) -> list[dict]:
        return poll(
            f"job {job}: {count} run(s) settled",
            lambda: (
                rows
                if len(
                    rows := sorted(
                        (r for r in slurm.runs(job) if r["state"] == "settled" and r["submit_time"] >= started),
                        key=lambda r: r["submit_time"],
                    )
                )
                >= count
                else None
            ),
            90,
        )

    settled = settled_runs(explore, 2) + settled_runs(prod, 1)
    per_gpu = slurm.config().partition("a100").shards_per_gpu  # the admin's: a shard is this share of a GPU
    for run, row in zip(runs, settled, strict=True):
        tres = dict(item.split("=") for item in run["AllocTRES"].split(","))
        gpus = Fraction(int(tres["gres/gpu"])) if "gres/gpu" in tres else Fraction(int(tres["gres/shard"]), per_gpu)
        hold = math.ceil(int(run["TimelimitRaw"]) * 60 * gpus * A100)
        due = math.ceil(int(run["ElapsedRaw"]) * gpus * A100)
        assert (row["hold"], row["charge"], row["refund"]) == (hold, due, hold - due), row
        assert row["end_state"] == run["State"].split(" ")[0]
    assert settled[0]["charge"] > 0  # the preempted run was not refunded: preempting it gained alice nothing

    # The report (an admin's, on the login node) counts the preemption under the explore tier, with
    # what it was charged, and the job that came back; nothing else of vision's ran since.
    res = subprocess.run(
        [
            str(VENV_BIN / "slurm-yolo"),
            "report",
            "--json",
            "--view",
            "preemptions",
            "-A",
            "vision",
            "--since",
            runs[0]["Submit"],
        ],
        capture_output=True,
        text=True,
        env=slurm.env(),
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)["preemptions"]
    assert [
        (r["Partition"], r["QOS"], r["runs"], r["preempted"], r["preempted_tokens_charged"], r["resumed_completed"])
        for r in got
    ] == [("a100", "yolo-explore", 2, 1, settled[0]["charge"], 1)]
