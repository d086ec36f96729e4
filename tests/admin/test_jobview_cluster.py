"""``slurm-yolo job``: one job as seff shows it, asserted against sacct and the ledger, on the bundled
22.05 cluster (the report's pandas is the host install's), for its owner and no one else under
PrivateData=jobs; why a yolo-sbatch job failed and the command that resumes one cut by its limit;
``slurm-yolo jobs``, a user's recent jobs a line each."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import USERS_FS, VENV_BIN, Slurm, fund, poll, report_private_data, skip_requeue_delay

from slurm_yolo.core.synthetic import make_dataset

pytestmark = pytest.mark.cluster

# The job's training, stood in for (the launcher's SLURM_YOLO_TRAINER, as bench/site_standin.py is):
# it fails as ultralytics fails on a data yaml whose images are not there, or writes what ultralytics
# writes (args.yaml, a results.csv row and a whole last.pt per epoch) every STANDIN_EPOCH_S seconds.
STANDIN = """\
import json, os, sys, time, zipfile
from pathlib import Path
plan = json.loads(sys.argv[1])
args = plan["args"]
if os.environ.get("STANDIN_FAIL"):
    raise FileNotFoundError("Dataset 'data.yaml' images not found, missing path '/nowhere/images/val'")
folder = Path(plan["resume"]).parent.parent if plan["resume"] else Path(args["project"]) / args["name"]
(folder / "weights").mkdir(parents=True, exist_ok=True)
(folder / "args.yaml").write_text(
    f"task: detect\\nmode: train\\nmodel: yolov8n.yaml\\ndata: {args['data']}\\nepochs: {args['epochs']}\\nimgsz: 64\\n"
)
with os.fdopen(int(sys.argv[2]), "w") as report:
    report.write(json.dumps({"save_dir": str(folder), "gpus": 0}) + "\\n")
(folder / "results.csv").write_text("epoch,time\\n")
for epoch in range(1, int(args["epochs"]) + 1):
    time.sleep(float(os.environ.get("STANDIN_EPOCH_S", "4")))
    with (folder / "results.csv").open("a") as f:
        f.write(f"{epoch},{epoch * 4}\\n")
    with zipfile.ZipFile(folder / "weights" / ".last.tmp", "w") as z:
        z.writestr("epoch", str(epoch))
    os.replace(folder / "weights" / ".last.tmp", folder / "weights" / "last.pt")
"""


def yolo_sbatch(
    cluster: Slurm, words: list[str], cwd: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """``yolo-sbatch WORDS`` as alice on the 22.05 cluster, started (its output read by the caller)."""
    return subprocess.Popen(
        ["/usr/sbin/runuser", "-u", "alice", "--", str(VENV_BIN / "yolo-sbatch"), *words],
        cwd=cwd,
        env=cluster.env("alice") | (env or {}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finished(proc: subprocess.Popen[str], timeout: float = 240) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def submitted(out: str) -> int:
    line = next(w for w in out.splitlines() if w.startswith("Submitted batch job "))
    return int(line.split()[3])


@pytest.fixture
def folder() -> Iterator[Path]:
    """alice's folder on the users' file system, with a small dataset and the stand-in trainer."""
    root = Path(tempfile.mkdtemp(dir=USERS_FS))
    root.chmod(0o777)
    (root / "standin_trainer.py").write_text(STANDIN)
    make_dataset(root / "ds", train=16, val=8, size=96)
    subprocess.run(["chown", "-R", "alice", str(root)], check=True)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def test_a_finished_a_timed_out_and_a_requeued_job_are_what_sacct_and_the_ledger_say(
    cluster: Slurm, folder: Path
) -> None:
    fund(cluster, ("vision",), 10**15)
    standin = {"PYTHONPATH": str(folder), "SLURM_YOLO_TRAINER": "standin_trainer", "STANDIN_EPOCH_S": "4"}
    train = ["train", "model=yolov8n.yaml", f"data={folder / 'ds' / 'data.yaml'}", "imgsz=64", f"project={folder}"]
    cut_wait = yolo_sbatch(  # cut by its 1-minute limit after a dozen saved epochs of 40
        cluster,
        ["--wait", "-A", "vision", "-p", "t4", "-t", "1", "-J", "cut", *train, "epochs=40", "name=cut"],
        folder,
        standin,
    )
    failing_wait = yolo_sbatch(  # ultralytics' error on a data yaml whose images are not there, as the job's own
        cluster,
        ["--wait", "-A", "vision", "-p", "t4", "-J", "fails", *train, "epochs=3", "name=fails"],
        folder,
        standin | {"STANDIN_FAIL": "1"},
    )
    done = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "10", script="sleep 3", user="alice")
    late = cluster.sbatch(
        "-A", "vision", "-p", "a100", "--gres=gpu:a100:1", "-t", "1", script="sleep 300", user="alice"
    )
    again = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "2", script="sleep 8", user="alice")

    def running(job: int) -> bool:
        return cluster.cmd("squeue", "-h", "-j", str(job), "-o", "%T").stdout.strip() == "RUNNING"

    poll(f"job {again} running", lambda: running(again), 120)
    cluster.cmd("scontrol", "requeue", str(again))
    skip_requeue_delay(again, cluster)
    code, failing_out = finished(failing_wait)
    failing = submitted(failing_out)
    error = "FileNotFoundError: Dataset 'data.yaml' images not found, missing path '/nowhere/images/val'"
    assert code == 1 and f"job {failing} FAILED: {error}\n" in failing_out, failing_out
    code, cut_out = finished(cut_wait)
    cut = submitted(cut_out)
    assert code == 1 and f"job {cut} TIMEOUT: " in cut_out, cut_out
    runs = {done: 1, late: 1, again: 2, failing: 1, cut: 1}
    for job, count in runs.items():
        cluster.settled(job, count, timeout=240)

    def billed() -> dict | None:  # alice reads the published copy: it follows the books within a batch
        res = cluster.cli("job", ",".join(map(str, runs)), "--json", user="alice")
        views = {s["job_id"]: s for s in json.loads(res.stdout)}
        return views if all(r["charge"] is not None for v in views.values() for r in v["runs"]) else None

    got = poll("the job views billed", billed, 60)
    for job, count in runs.items():
        sacct = cluster.ended(job, count)
        rows = cluster.settled(job, count)
        view = got[job]
        assert (view["user"], view["account"], len(view["runs"])) == ("alice", "vision", count)
        for r, rec, row in zip(view["runs"], sacct, rows, strict=True):
            assert (r["state"], r["elapsed_s"]) == (rec["State"].split(" ")[0], int(rec["ElapsedRaw"]))
            assert (r["hold"], r["charge"], r["refund"]) == (row["hold"], row["charge"], row["refund"])
        assert view["charge"] == sum(row["charge"] for row in rows)
    assert [r["state"] for r in got[again]["runs"]] == ["REQUEUED", "COMPLETED"]
    assert got[late]["state"] == "TIMEOUT" and any("hit its time limit" in a for a in got[late]["advice"])
    text = cluster.cli("job", str(done), user="alice").stdout
    assert text.startswith(f"Job {done}: COMPLETED\n  user alice, account vision, partition t4")
    assert got[failing]["state"] == "FAILED" and got[failing]["why"] == error
    assert f"  why: {error}\n" in cluster.cli("job", str(failing)).stdout  # root reads it as alice could

    # the run cut by its limit goes on from its real last.pt, with a limit for the epochs it has left
    view = got[cut]
    last = folder / "cut" / "weights" / "last.pt"
    assert view["state"] == "TIMEOUT" and 0 < view["saved_epoch"] < view["epochs"] == 40
    words = shlex.split(view["resume"])
    assert words[:5] == ["yolo-sbatch", "-p", view["partition"], "-A", "vision"] and words[-1] == f"model={last}"
    assert int(words[6]) > 1 and f"; to train the rest: {view['resume']}\n" in cut_out  # --wait says the same
    assert any(view["resume"] in a for a in view["advice"])
    code, out = finished(yolo_sbatch(cluster, words[1:], folder / "ds"))  # as printed, from elsewhere
    resumed = submitted(out)
    cluster.cmd("scancel", str(resumed))
    assert code == 0 and f"limit {words[6]} min" in out, out
    cluster.at_rest(resumed)


def test_under_private_data_a_job_is_its_owners_alone(cluster: Slurm) -> None:
    fund(cluster, ("vision",), 10**15)
    job = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "5", script="sleep 1", user="alice")
    cluster.ended(job)
    home = Path("/var/tmp/slurm-yolo-tests") / f"jobview-{os.getpid()}"
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o755)
    try:
        report_private_data(home, "jobs")
        env = {"SLURM_YOLO_CONFIG": str(home / "config.toml")}
        mine = cluster.cli("job", str(job), user="alice", extra_env=env)
        assert mine.stdout.startswith(f"Job {job}: COMPLETED\n")
        theirs = cluster.cli("job", str(job), user="bob", extra_env=env, check=False)
        assert (theirs.returncode, theirs.stdout) == (1, "")
        assert theirs.stderr == (
            f"Error: job {job} is not one you may see (bob: Slurm's PrivateData hides other users' jobs)\n"
        )
        assert cluster.cli("job", str(job), extra_env=env).returncode == 0  # root sees every job
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_users_recent_jobs_are_a_line_each_as_sacct_and_the_ledger_say(cluster: Slurm) -> None:
    """``slurm-yolo jobs``: alice's jobs of the last week (this test's, among any others of hers)."""
    fund(cluster, ("vision",), 10**15)
    ran = cluster.sbatch("-A", "vision", "-p", "t4", "--gres=gpu:t4:1", "-t", "5", script="sleep 2", user="alice")
    rows = cluster.settled(ran)
    sacct = cluster.ended(ran)[0]

    def listed() -> dict | None:  # the published copy follows the books within a batch
        found = {r["job_id"]: r for r in json.loads(cluster.cli("jobs", "--json", user="alice").stdout)}
        return found if found.get(ran, {}).get("charge") is not None else None

    found = poll("alice's jobs billed", listed, 60)
    assert {r["user"] for r in found.values()} == {"alice"}
    mine = found[ran]
    assert (mine["state"], mine["partition"], mine["gpus"], mine["elapsed_s"], mine["limit_s"]) == (
        sacct["State"],
        "t4",
        1.0,
        int(sacct["ElapsedRaw"]),
        int(sacct["TimelimitRaw"]) * 60,
    )
    assert mine["charge"] == rows[0]["charge"]
    lines = [line for line in cluster.cli("jobs", user="alice").stdout.splitlines() if line.split()[:1] == [str(ran)]]
    assert len(lines) == 1 and lines[0].split()[1:4] == ["COMPLETED", "t4", "1"]
    theirs = cluster.cli("jobs", "-u", "alice", user="bob", check=False)  # the bundled cluster hides no jobs
    assert theirs.returncode == 0 and str(ran) in theirs.stdout
