"""The job script: golden file, and hostile values that must never execute."""

from __future__ import annotations

import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_yolo.core import spec
from slurm_yolo.core.config import Partition, load
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model import estimate
from slurm_yolo.core.model.timemodel import TimeModel
from slurm_yolo.login import plan, render

GOLDEN = Path(__file__).parents[1] / "golden" / "train.sbatch"
WORDS = ["detect", "train", "model=yolo11s.yaml", "data=/data/ds.yaml", "epochs=30", "imgsz=640", "batch=32"]


def fixed_plan(site_config: Path) -> plan.Plan:
    cfg = load()
    s = spec.parse(WORDS)
    m = estimate.lookup_model("yolo11s")
    assert m is not None
    w = estimate.workload(s, 5000, 500, m)
    tm = TimeModel(
        k=0.05,
        overhead_seconds=10,
        val_weight=0.4,
        iteration_seconds=0.02,
        startup_seconds=30,
        n=30,
        coverage=0.99,
        coverage_z=math.log(1.1),
        noise_relative=1.0,
    )
    part = Partition("a100", gpu_type="a100", gpus_per_node=2, shards_per_gpu=4)
    return plan.plan_partition(w, tm, "test", part, plan.Request("a100", priority="prod"), cfg)


def opts(**kw: object) -> render.JobOptions:
    return render.JobOptions(python="/opt/slurm-yolo/venv/bin/python", **kw)  # type: ignore[arg-type]


def test_golden_script(site_config: Path) -> None:
    text = render.render(fixed_plan(site_config), opts(account="vision", job_name="coco-s"), tuple(WORDS))
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text()


def test_templates_ship_in_the_package() -> None:
    assert (render.templates_dir() / "train.sbatch").is_file()


@pytest.mark.parametrize(
    ("value", "written"),
    [("plain-name_1", "plain-name_1"), ("x y", '"x y"'), ('a"b', "'a\"b'"), ("it's $(x)", '"it\'s $(x)"')],
)
def test_directive_quoting(value: str, written: str) -> None:
    assert render.directive_value("--job-name", value) == written


@pytest.mark.parametrize("value", ["a\nb", "a\rb", "a\x00b", "both ' and \""])
def test_directive_refuses_unrepresentable(value: str) -> None:
    with pytest.raises(UsageError, match="--job-name"):
        render.directive_value("--job-name", value)


def test_raw_sbatch_arg_must_be_an_option(site_config: Path) -> None:
    with pytest.raises(UsageError, match="--sbatch-arg"):
        render.render(fixed_plan(site_config), opts(extra=("x; rm -rf /",)), tuple(WORDS))
    with pytest.raises(UsageError, match="is not an sbatch option"):
        render.render(fixed_plan(site_config), opts(extra=("--x;y=1",)), tuple(WORDS))


HOSTILE = [
    "name=$(touch {p}/pwned1)",
    "project=`touch {p}/pwned2`",
    "name=a;touch {p}/pwned3",
    "name=x' ; touch {p}/pwned4 ; '",
    'name=x" ; touch {p}/pwned5 ; "',
    "name=$HOME",
    "name=a b",
    "name=*",
    "name=\\",
    "name=ünï©ødé",
]


def test_hostile_words_reach_the_launcher_verbatim(site_config: Path, tmp_path: Path) -> None:
    """Run the rendered script with bash: the launcher gets each word unchanged and nothing executes."""
    dump = tmp_path / "dump.py"
    dump.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(tmp_path / 'argv.json')!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    dump.chmod(dump.stat().st_mode | stat.S_IXUSR)
    words = ["train", "data=/d.yaml"] + [h.format(p=tmp_path) for h in HOSTILE]
    script = render.render(fixed_plan(site_config), render.JobOptions(python=str(dump)), tuple(words))
    stub = tmp_path / "bin" / "srun"  # outside a job the preemption watch must not ask Slurm for anything
    stub.parent.mkdir()
    stub.write_text(f"#!/bin/sh\ntouch {tmp_path / 'srun-called'}\n")
    stub.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env["PATH"] = f"{stub.parent}:{env.get('PATH', '/usr/bin:/bin')}"
    subprocess.run(["bash", "-c", script], check=True, cwd=tmp_path, timeout=30, env=env)
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == ["-m", "slurm_yolo", "run", "--", *words]
    assert not (tmp_path / "srun-called").exists()
    assert not list(tmp_path.glob("pwned*"))


def test_comment_carries_the_estimate(site_config: Path) -> None:
    p = fixed_plan(site_config)
    c = render.comment(p)
    assert c.startswith("yolo:") and " " not in c and '"' not in c
    fields = dict(kv.split("=") for kv in c[5:].split(","))
    assert int(fields["limit_s"]) == p.time_limit_seconds
    assert float(fields["eff"]) == pytest.approx(p.work_pixels, rel=1e-6)


def test_short_limits_get_no_signal(site_config: Path) -> None:
    from dataclasses import replace

    p = replace(fixed_plan(site_config), time_limit_seconds=120)
    script = render.render(p, opts(), tuple(WORDS))
    assert "#SBATCH --signal" not in script
    # the comment says so, and promises no warning the script does not ask for
    assert "# No --signal: a time limit under 3 min gets no warning" in script and "With --signal" not in script
    p = replace(p, time_limit_seconds=3600)
    script = render.render(p, opts(), tuple(WORDS))
    assert "#SBATCH --signal=B:USR2@120" in script
    assert (
        "# With --signal=B:USR2@120, Slurm sends USR2 120 s before the time limit." in script
        and "No --signal" not in script
    )
    p = replace(p, time_limit_seconds=180)  # half the limit: the lead shrinks, and the comment with it
    script = render.render(p, opts(), tuple(WORDS))
    assert "#SBATCH --signal=B:USR2@90" in script and "Slurm sends USR2 90 s before" in script


def test_the_preemption_watch_passes_term_on_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """The job script's watch step, as srun would start it: SIGTERM (a preemption, or the job's end)
    sends USR1 to the batch shell and ends the step with its sleep (an orphaned sleep outlived job
    1067 of a README run: proctrack/linuxproc does not follow a process whose parent exited)."""
    import re
    import time

    text = (render.templates_dir() / "train.sbatch").read_text()
    (watch,) = re.findall(r"bash -c '(.+)' 2>/dev/null &", text)
    mark = tmp_path / "usr1"
    batch = subprocess.Popen(["bash", "-c", f"trap 'touch {mark}; exit 0' USR1; while :; do sleep 0.1; done"])
    step = subprocess.Popen(["bash", "-c", watch], env={**os.environ, "SLURM_YOLO_BATCH_PID": str(batch.pid)})
    children = Path(f"/proc/{step.pid}/task/{step.pid}/children")
    deadline = time.monotonic() + 10
    while not children.read_text().split() and time.monotonic() < deadline:
        time.sleep(0.05)
    (sleep,) = map(int, children.read_text().split())
    step.terminate()
    assert step.wait(10) == 0 and batch.wait(10) == 0 and mark.exists()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{sleep}").exists() and Path(f"/proc/{sleep}/cmdline").read_bytes().startswith(b"sleep"):
        assert time.monotonic() < deadline, "the watch's sleep outlived it"
        time.sleep(0.05)
