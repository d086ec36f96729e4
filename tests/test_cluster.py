"""yolo-sbatch against the real local Slurm: what Slurm records equals the plan."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.slurm import commands, parsers

pytestmark = pytest.mark.cluster


def submit(args: list[str]) -> dict:
    res = CliRunner().invoke(yolo_sbatch, ["--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def scancel(job_id: int) -> None:
    subprocess.run(["/usr/bin/scancel", str(job_id)], check=False)


def sacct_row(
    job_id: int, timeout: float = 30, until: Callable[[dict[str, str]], bool] = lambda r: True
) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = commands.sacct_jobs([job_id])
        if rows and rows[0]["Partition"] and until(rows[0]):
            return rows[0]
        time.sleep(0.3)
    pytest.fail(f"job {job_id} never reached sacct")


@pytest.mark.parametrize(
    ("partition", "extra", "model", "gres"),
    [
        ("a100", ["--gpus", "2"], "yolov8n.yaml", "gpu:a100:2"),
        ("a100", [], "yolov8n.yaml", "shard:a100:2"),
        ("t4", [], "yolov8l.yaml", "gpu:t4:1"),
        ("t4", ["--priority", "explore"], "yolo11n.yaml", "shard:t4:2"),
    ],
)
def test_slurm_records_the_plan(
    cluster: None,
    site_config: Path,
    dataset: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    partition: str,
    extra: list[str],
    model: str,
    gres: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    d = submit(
        [
            "-p",
            partition,
            *extra,
            "--sbatch-arg=--hold",
            "-J",
            "plan-check",
            "train",
            f"model={model}",
            f"data={dataset}",
            "epochs=5",
            "imgsz=96",
        ]
    )
    job_id = d["job_id"]
    try:
        assert d["gres"] == gres
        job = commands.show_job(job_id)
        assert job["Partition"] == partition
        assert job["QOS"] == d["qos"]
        assert parsers.duration(job["TimeLimit"]) == d["time_limit_seconds"]
        assert job["TresPerNode"] == f"gres:{gres}"
        assert job["Comment"].startswith("yolo:tok=")
        row = sacct_row(job_id)
        assert (row["Partition"], row["QOS"], int(row["TimelimitRaw"]) * 60) == (
            partition,
            d["qos"],
            d["time_limit_seconds"],
        )
    finally:
        scancel(job_id)
    # slurmdbd stores the comment with the job's end record.
    assert sacct_row(job_id, until=lambda r: r["State"].startswith("CANCELLED"))["Comment"] == job["Comment"]


def test_hostile_job_name_is_data_not_code(
    cluster: None, site_config: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = "x$(touch pwned);`id`"  # no '/': under the log's %x that would name a folder, refused before submitting
    d = submit(
        [
            "-p",
            "t4",
            "--sbatch-arg=--hold",
            "-J",
            name,
            "train",
            f"data={dataset}",
            "model=yolov8n.yaml",
            f"name=n$(touch {tmp_path}/pwned2)",
        ]
    )
    try:
        assert commands.show_job(d["job_id"])["JobName"] == name
        assert not list(tmp_path.glob("pwned*"))
    finally:
        scancel(d["job_id"])


def test_slurm_error_is_one_line_and_nothing_submitted(cluster: None, site_config: Path, dataset: Path) -> None:
    before = subprocess.run(["/usr/bin/squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=False).stdout
    res = CliRunner().invoke(
        yolo_sbatch,
        ["-p", "t4", "--sbatch-arg=--nodelist=no-such-node", "train", f"data={dataset}", "model=yolov8n.yaml"],
    )
    assert res.exit_code == 1
    assert (
        res.output.startswith("Error: job not submitted: sbatch failed:") and len(res.output.strip().splitlines()) == 1
    )
    assert (
        subprocess.run(["/usr/bin/squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=False).stdout
        == before
    )


def test_cpus_past_a_nodes_share_are_refused_from_slurms_node_records(
    cluster: None, site_config: Path, dataset: Path
) -> None:
    """The bundled nodes have 4 CPUs and 2 GPUs: Slurm's node records say 2 CPUs per GPU, and a job
    asking 3 would pend for ever (PartitionConfig): refused in one line, nothing submitted."""
    assert commands.node_shapes()["t4"] == parsers.NodeShape(2, 1.95, 1, 4, 2)
    before = subprocess.run(["/usr/bin/squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=False).stdout
    res = CliRunner().invoke(yolo_sbatch, ["-p", "t4", "--cpus-per-gpu", "3", "train", f"data={dataset}"])
    assert res.exit_code == 1 and res.output.startswith("Error: --cpus-per-gpu 3: partition t4's nodes have 2 CPUs"), (
        res.output
    )
    assert len(res.output.strip().splitlines()) == 1
    after = subprocess.run(["/usr/bin/squeue", "-h", "-o", "%i"], capture_output=True, text=True, check=False).stdout
    assert after == before


@pytest.mark.train
def test_real_training_job_end_to_end(
    cluster: None,
    training_site: Path,
    dataset: Path,
    tmp_path: Path,
) -> None:
    res = CliRunner().invoke(
        yolo_sbatch,
        [
            "-p",
            "t4",
            "--wait",
            "-J",
            "e2e",
            "train",
            "model=yolov8n.yaml",
            f"data={dataset}",
            "epochs=2",
            "imgsz=64",
            "batch=8",
            f"project={tmp_path}/runs",
            "name=e2e",
        ],
    )
    job_id = int(res.output.split()[3])
    log = tmp_path / f"e2e-{job_id}.out"  # the default log name: NAME-JOBID.out
    assert res.exit_code == 0, (res.output, log.read_text()[-3000:] if log.is_file() else "no log")
    assert f"job {job_id} COMPLETED" in res.output and log.is_file()
    records = [json.loads(line) for line in (tmp_path / f"yolo-usage-{job_id}.jsonl").read_text().splitlines()]
    epochs = [r for r in records if r["kind"] == "epoch"]
    assert [r["epoch"] for r in epochs] == [1, 2] and all(r["images"] == 16 for r in epochs)
    assert records[-1]["kind"] == "end"
    assert (tmp_path / "runs" / "e2e" / "results.csv").exists()
    assert sacct_row(job_id, until=lambda r: r["State"] == "COMPLETED")["Comment"].startswith("yolo:tok=")


def test_wait_gives_up_after_its_timeout_and_the_job_goes_on(
    cluster: None, site_config: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        yolo_sbatch,
        [
            "-p",
            "t4",
            "--wait",
            "--wait-timeout",
            "2s",
            "--sbatch-arg=--hold",
            "-J",
            "wait-timeout",
            "train",
            f"data={dataset}",
            "model=yolov8n.yaml",
        ],
    )
    job = int(res.output.split()[3])
    try:
        assert res.exit_code == 1 and res.output.strip().splitlines()[-1].startswith(
            f"Error: job {job} still PENDING after 2 s"
        )
        assert commands.job_state(job) == "PENDING"  # waiting stopped, the job did not
    finally:
        subprocess.run(["/usr/bin/scancel", str(job)], check=False)


def test_wait_on_a_job_that_did_not_complete_names_its_log(
    cluster: None, site_config: Path, dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--wait`` on a job that ends other than COMPLETED exits 1 and says where its log is (Slurm's
    name for it, in the job's work dir), so the user does not have to work out ``%x-%j.out``."""
    import threading

    monkeypatch.chdir(tmp_path)
    name = f"wait-ends-{time.time_ns()}"

    def cancel_once_queued() -> None:
        for _ in range(300):
            jobs = subprocess.run(
                ["/usr/bin/squeue", "-h", "-n", name, "-o", "%i"], capture_output=True, text=True, check=False
            ).stdout.split()
            if jobs:
                subprocess.run(["/usr/bin/scancel", *jobs], check=False)
                return
            time.sleep(0.2)

    canceller = threading.Thread(target=cancel_once_queued)
    canceller.start()
    res = CliRunner().invoke(
        yolo_sbatch,
        [
            "-p",
            "t4",
            "--wait",
            "--wait-timeout",
            "2m",
            "--sbatch-arg=--hold",
            "-J",
            name,
            "train",
            f"data={dataset}",
            "model=yolov8n.yaml",
        ],
    )
    canceller.join()
    job = int(res.output.split()[3])
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines()[-2:] == [  # no log line to say why: Slurm's reason
        f"job {job} CANCELLED: its log is {tmp_path / f'{name}-{job}.out'}",
        f"job {job} CANCELLED: Slurm: it was cancelled (scancel, by its user or an admin)",
    ]


def test_watching_a_job_slurm_does_not_know_is_one_error(cluster: None, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_yolo.cli.admin import main as admin

    monkeypatch.setattr(commands, "UNKNOWN_GRACE_SECONDS", 1.0)
    res = CliRunner().invoke(admin, ["watch", "--interval", "0.3", "999999999"])
    assert (res.exit_code, res.output) == (
        1,
        "Error: job 999999999: Slurm knows no such job\n",
    )  # no UNKNOWN line first
