"""Parsers of Slurm output, on output recorded from the real 22.05 cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_yolo.slurm import parsers

REC = Path(__file__).parents[1] / "recorded"


def test_scontrol_record() -> None:
    job = parsers.scontrol_record((REC / "scontrol_show_job.txt").read_text().splitlines()[0])
    assert job["JobId"] == "3" and job["Partition"] == "a100" and job["QOS"] == "normal"
    assert job["TimeLimit"] == "00:05:00" and job["TresPerNode"] == "gres:gpu:a100:1"
    assert job["AllocNode:Sid"] == "localhost:1108"


def test_scontrol_values_with_spaces() -> None:
    rec = parsers.scontrol_record("JobId=5 JobName=a b c Comment=yolo:tok=1,k=2 WorkDir=/x y")
    assert rec == {"JobId": "5", "JobName": "a b c", "Comment": "yolo:tok=1,k=2", "WorkDir": "/x y"}


def test_delimited_fields_may_hold_newlines_and_pipes() -> None:
    text = "1<D>yo|lo<D>a\nb<D>\n2<D><D>\n3|x<D>\n"
    assert parsers.delimited(text, 3, "<D>") == [["1", "yo|lo", "a\nb"], ["2", "", "\n3|x"]]
    assert parsers.delimited("1<D>a<D>b<D>", 3, "<D>") == [["1", "a", "b"]]  # no final newline
    assert parsers.delimited("", 3, "<D>") == []


def test_delimited_drops_a_record_that_does_not_line_up() -> None:
    """Saved with ``|``, a name holding one gives its record a field too many: it is dropped, and the
    next record is read from its own line, never shifted."""
    assert parsers.delimited("1|yo|lo|x|\n2|ok|y|\n3|a|b|", 3, "|") == [["2", "ok", "y"], ["3", "a", "b"]]
    assert parsers.delimited("1|a|\n2|ok|y|\n", 3, "|") == [["2", "ok", "y"]]  # a field short
    assert parsers.delimited("1|a|b|c|d|e", 3, "|") == []


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:05:00", 300),
        ("1-02:03:04", 93784),
        ("4:59", 299),
        ("10", 600),
        ("UNLIMITED", None),
        ("", None),
        ("2-00:00:00", 172800),
    ],
)
def test_duration(text: str, seconds: int | None) -> None:
    assert parsers.duration(text) == seconds


@pytest.mark.parametrize(("seconds", "arg"), [(60, "1"), (61, "2"), (3600, "60"), (0, "1")])
def test_minutes_arg(seconds: int, arg: str) -> None:
    assert parsers.minutes_arg(seconds) == arg


def test_sbatch_job_id() -> None:
    assert parsers.sbatch_job_id("42\n") == 42
    assert parsers.sbatch_job_id("43;yolo\n") == 43
    with pytest.raises(ValueError):
        parsers.sbatch_job_id("sbatch: error\n")


def test_will_run_start_elsewhere() -> None:
    line = "sbatch: Job 9 to start at {} on cluster c2 using 2 processors on nodes n[1-2] in partition p\n"
    assert parsers.will_run_start(line.format(1796068800)) == 1796068800  # several clusters asked (-M)
    with pytest.raises(ValueError):
        parsers.will_run_start(line.format("Unknown"))  # a start Slurm cannot tell
    with pytest.raises(ValueError):  # only Slurm's own line counts, not text quoted in another
        parsers.will_run_start("sbatch: error: x Job 9 to start at 1 using 1 processors\n")


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_default_partition(release: str) -> None:
    text = (REC / release / "scontrol_partitions.txt").read_text()
    assert parsers.default_partition(text) == "a100"
    assert parsers.default_partition(text.replace("Default=YES", "Default=NO")) is None
    assert parsers.default_partition("") is None


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_will_run_start(release: str) -> None:
    """``sbatch --test-only`` with SLURM_TIME_FORMAT=%s: the start on stderr (recorded with a100 busy)."""
    rec = json.loads((REC / release / "sbatch_test_only.json").read_text())
    for case in rec["started"]:
        assert parsers.will_run_start(case["stderr"]) == case["start"]
    for case in rec["refused"]:
        with pytest.raises(ValueError, match="printed no start time"):
            parsers.will_run_start(case["stderr"])


def test_node_shapes_take_each_partitions_smallest_gpu_node() -> None:
    """``sinfo -h -N -a -o NODE_FORMAT`` as 22.05 and 24.11 print it (a node once per partition, a
    default partition starred, GRES with a socket binding on some)."""
    text = (
        "a100*|gpu-a100-1|64|512000|2|gpu:a100:8(S:0-1),shard:a100:32\n"
        + "a100*|gpu-a100-2|24|256000|1|gpu:a100:4\n"
        + "t4|gpu-t4-1|4|4000|1|gpu:t4:2,shard:t4:8\n"
        + "debug|gpu-t4-1|4|4000|1|gpu:t4:2,shard:t4:8\n"
        + "cpu|cpu-1|128|512000|2|(null)\n"
        + "bad|x|?|4000|1|gpu:2\n"
    )
    shapes = parsers.node_shapes(text)
    assert set(shapes) == {"a100", "t4", "debug"}
    a100 = shapes["a100"]
    assert (a100.cpus_per_gpu, a100.memory_gb_per_gpu, a100.threads_per_core, a100.gpus) == (6, 62.5, 2, 4)
    assert shapes["t4"] == parsers.NodeShape(2, 1.95, 1, 4, 2)
