"""The watchdog on stand-in Slurm commands: it acts on an array task alone (``ARRAY_TASK``: the task's
own id can be the array's, which names every task), finds its files by the task's own id, and reads
squeue's fields whatever a job's name holds (``|``, newlines). The real cluster's run is
test_jobside's."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.progress import expand_pattern

# squeue -O JobID,ArrayJobID,ArrayTaskID,Name,UserName,WorkDir,STDOUT,TimeUsed, as Slurm prints them
ROWS = [
    ("101", "100", "5", "evil|w2|x\nname", "alice", "{w1}", "{w1}/z-%A_%a.out", "1:00:00"),  # silent array task
    ("100", "100", "7", "ok", "alice", "{w1}", "{w1}/z-%A_%a.out", "1:00:00"),  # the array's record: it writes
    ("200", "200", "N/A", "a|b|c", "bob", "{w2}", "{w2}/z-%j.out", "2:00:00"),  # silent plain job
    ("300", "300", "N/A", "young", "bob", "{w2}", "{w2}/y-%j.out", "0:20"),  # too young to judge
]
SQUEUE = r"""#!{python}
import json, sys
fields = sys.argv[sys.argv.index("-O") + 1].split(",")
delimiter = fields[0].split(":", 1)[1]  # the suffix after each field, as squeue prints it
assert all(f.endswith(":" + delimiter) for f in fields), fields
for row in json.load(open({rows!r})):
    sys.stdout.write("".join(value + delimiter for value in row) + "\n")
"""


def test_watchdog_acts_on_the_array_task_alone(tmp_path: Path, home: Path) -> None:
    w1, w2 = tmp_path / "w1", tmp_path / "w2"
    w1.mkdir()
    w2.mkdir()
    rows = [[v.format(w1=w1, w2=w2) for v in row] for row in ROWS]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(SQUEUE.format(python=sys.executable, rows=str(tmp_path / "rows.json")))
    for name in ("scontrol", "scancel"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/slurm.log\n')
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{bin_dir}"\n')
    old = time.time() - 3600
    for name in ("w1/yolo-usage-101.jsonl", "w1/z-100_5.out", "w2/yolo-usage-200.jsonl", "w2/z-200.out"):
        (tmp_path / name).write_text("{}\n")
        os.utime(tmp_path / name, (old, old))
    (w1 / "yolo-usage-100.jsonl").write_text("{}\n")  # task 7 (job 100) is training

    dry = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "10", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    found = json.loads(dry.output)
    assert [(z["job_id"], z["target"]) for z in found] == [(101, "100_5"), (200, "200")]
    assert found[0]["evidence"] == [str(w1 / "yolo-usage-101.jsonl"), str(w1 / "z-100_5.out")]
    assert not (tmp_path / "slurm.log").exists()

    res = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "10"])
    assert res.exit_code == 0, res.output
    assert [(line.split(":")[0], line.split("->")[1]) for line in res.output.splitlines()] == [
        ("job 100_5", " requeue"), ("job 200", " requeue")]  # fmt: skip
    assert (tmp_path / "slurm.log").read_text().splitlines() == ["scontrol requeue 100_5", "scontrol requeue 200"]
    res = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "10", "--action", "cancel"])
    assert (tmp_path / "slurm.log").read_text().splitlines()[2:] == ["scancel 100_5", "scancel 200"]
    res = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "90", "--dry-run"])  # silent for 60 min
    assert (res.exit_code, res.output) == (0, "no running job silent for 90 min or more\n")


def test_output_patterns_of_array_tasks() -> None:
    assert expand_pattern("/o/%x-%A_%a.%j.out", 101, "n", "u", "100", "5") == "/o/n-100_5.101.out"
    assert expand_pattern("/o/%A-%j-%u-%%-%a", 7, "n", "u") == "/o/7-7-u-%-%a"  # not an array: %a stays
