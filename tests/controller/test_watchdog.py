"""The watchdog on stand-in Slurm commands: it acts on an array task alone (``ARRAY_TASK``: the task's
own id can be the array's, which names every task), judges each job by the summary in its own Comment
(no file of the user's), and reads squeue's fields whatever a job's name or comment holds (``|``,
newlines, a summary's mark). The real cluster's run is test_jobside's."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.login.progress import expand_pattern

SILENT = "yolo:eff=1;run:at={then},ep=2,s=30,one=1,g=1,c=2"  # progress an hour ago
BUSY = "yolo:eff=1;run:at={now},ep=9,s=300,one=1,g=1,c=2"
# squeue -O JobID,ArrayJobID,ArrayTaskID,Name,UserName,WorkDir,STDOUT,TimeUsed,Comment, as Slurm prints them
ROWS = [
    ("101", "100", "5", "evil|w2|x\nname\udcff", "alice", "/w1", "/w1/z-%A_%a.out", "1:00:00", SILENT),  # silent task
    ("100", "100", "7", "ok", "alice", "/w1", "/w1/z-%A_%a.out", "1:00:00", BUSY),  # the array's record: training
    ("200", "200", "N/A", "a|b|c", "bob", "/w2", "/w2/z-%j.out", "2:00:00", "x|y\n" + SILENT),  # silent job
    ("300", "300", "N/A", "young", "bob", "/w2", "/w2/y-%j.out", "0:20", SILENT),  # too young to judge
    ("400", "400", "N/A", "plain", "bob", "/w2", "/w2/p-%j.out", "2:00:00", "mine;run:at=1,x=2"),  # no summary
    ("500", "500", "N/A", "ahead", "bob", "/w2", "/w2/p-%j.out", "2:00:00", BUSY.replace("{now}", "99999999999")),
]
SQUEUE = r"""#!{python}
import json, sys
fields = sys.argv[sys.argv.index("-O") + 1].split(",")
delimiter = fields[0].split(":", 1)[1]  # the suffix after each field, as squeue prints it
assert all(f.endswith(":" + delimiter) for f in fields), fields
for row in json.load(open({rows!r})):  # bytes, as squeue writes them: a user's name may be no UTF-8
    sys.stdout.buffer.write(("".join(value + delimiter for value in row) + "\n").encode("utf-8", "surrogateescape"))
"""


def test_watchdog_acts_on_the_array_task_alone(tmp_path: Path, home: Path) -> None:
    now = int(time.time())
    rows = [[v.replace("{then}", str(now - 3600)).replace("{now}", str(now)) for v in row] for row in ROWS]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "squeue").write_text(SQUEUE.format(python=sys.executable, rows=str(tmp_path / "rows.json")))
    for name in ("scontrol", "scancel"):  # task 100_5 asked --no-requeue: Slurm refuses to requeue it
        (bin_dir / name).write_text(
            f'#!/bin/sh\necho "{name} $*" >> {tmp_path}/slurm.log\n'
            'case "$*" in "requeue 100_5") echo "Requested operation is presently disabled'
            ' for job 100_5" >&2; exit 1;; esac\n'
        )
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    (home / "config.toml").write_text(f'[slurm]\nbin_dir = "{bin_dir}"\n')

    dry = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "10", "--dry-run", "--json"])
    assert dry.exit_code == 0, dry.output
    found = json.loads(dry.output)
    assert [(z["job_id"], z["target"]) for z in found] == [(101, "100_5"), (200, "200")]
    assert found[0]["evidence"] == [
        f"last progress {time.strftime('%Y-%m-%dT%H:%M:%S', time.localtime(now - 3600))} (its Comment)"
    ]
    assert 3600 <= found[0]["silent_seconds"] < 3700  # the summary's own time, not a file's
    assert not (tmp_path / "slurm.log").exists()

    res = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "10"])
    assert res.exit_code == 0, res.output
    assert [line.split(" (")[0] for line in res.output.splitlines()] == [
        "job 100_5: silent 60.0 min -> cancel",
        "job 200: silent 60.0 min -> requeue",
    ]
    assert "(requeue refused: " in res.output and "presently disabled for job 100_5" in res.output
    # the task Slurm would not requeue is cancelled, and the job after it is still acted on
    assert (tmp_path / "slurm.log").read_text().splitlines() == [
        "scontrol requeue 100_5",
        "scancel 100_5",
        "scontrol requeue 200",
    ]
    res = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "10", "--action", "cancel"])
    assert (tmp_path / "slurm.log").read_text().splitlines()[3:] == ["scancel 100_5", "scancel 200"]
    res = CliRunner().invoke(admin, ["watchdog", "--stall-minutes", "90", "--dry-run"])  # silent for 60 min
    assert (res.exit_code, res.output) == (0, "no running job silent for 90 min or more\n")


def test_output_patterns_of_array_tasks() -> None:
    assert expand_pattern("/o/%x-%A_%a.%j.out", 101, "n", "u", "100", "5") == "/o/n-100_5.101.out"
    assert expand_pattern("/o/%A-%j-%u-%%-%a", 7, "n", "u") == "/o/7-7-u-%-%a"  # not an array: %a stays
