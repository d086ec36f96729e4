"""The job's summary in its Comment (``beacon``): what the launcher writes is read back whole, and
anything else a user can put in her Comment is no summary, and never an exception."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.parse import beacon

HEAD = "yolo:tok=1000,eff=900,pred_s=60,limit_s=300,k=1,gpus=1"


def workload() -> estimate.Workload:
    m = estimate.lookup_model("yolov8n")
    assert m is not None
    return estimate.workload(spec.parse(["train", "data=d.yaml", "epochs=5", "imgsz=320"]), 200, 50, m)


def usage(path: Path, seconds: list[float], *extra: dict) -> Path:
    recs = [{"kind": "start", "gpus": 2, "cpus": 8, "workload": workload().to_dict()}]
    recs += [
        {"kind": "epoch", "epoch": i + 1, "epochs": 5, "images": 200, "tokens": 200 * 320**2, "seconds": s}
        for i, s in enumerate(seconds)
    ]
    path.write_text("\n".join(json.dumps(r) for r in [*recs, *extra]) + "\n")
    return path


def test_what_the_launcher_writes_the_controller_reads(tmp_path: Path) -> None:
    b = beacon.from_records(usage(tmp_path / "u.jsonl", [3.25, 4.5]), 1_700_000_123.9)
    assert b is not None
    comment = beacon.with_beacon(HEAD, b)
    assert comment.startswith(HEAD + beacon.MARK) and len(comment) < 1024
    got = beacon.decode(beacon.summary_text(comment))
    assert got == beacon.Beacon(1_700_000_123, 2, 7.75, True, 2, 8, workload())
    again = beacon.with_beacon(comment, replace(got, at=5))
    assert again.count(beacon.MARK) == 1 and again.startswith(HEAD)  # the summary is replaced, the estimate kept


def test_a_requeued_run_is_not_one_run(tmp_path: Path) -> None:
    path = usage(tmp_path / "u.jsonl", [1.0], {"kind": "requeue", "epoch": 1})
    b = beacon.from_records(path, 0)
    assert b is not None and b.one_run is False


def test_a_model_path_is_carried_as_its_file_name(tmp_path: Path) -> None:
    w = workload()
    b = beacon.Beacon(1, 1, 1.0, True, 1, 1, estimate.Workload(**{**w.to_dict(), "model": "/home/a/my-net.yaml"}))  # type: ignore[arg-type]
    got = beacon.decode(beacon.encode(b))
    assert got is not None and got.workload is not None and got.workload.model == "my-net.yaml"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "at=1,ep=1,s=1,one=1,g=1",  # a key missing
        "at=1,ep=1,s=1,one=1,g=1,c=1,c=2",  # twice
        "at=1,ep=1,s=1,one=1,g=1,c=1,zz=3",  # unknown, and no whole workload
        "at=-1,ep=1,s=1,one=1,g=1,c=1",
        "at=1,ep=1,s=nan,one=1,g=1,c=1",
        "at=1,ep=1,s=inf,one=1,g=1,c=1",
        "at=1,ep=1,s=1e9,one=1,g=1,c=1",
        "at=1,ep=1,s=1,one=2,g=1,c=1",
        "at=1,ep=1,s=1,one=1,g=1,c=1 ",
        "at=1,ep=1,s=1,one=1,g=١,c=1",  # a digit Python's int() takes, not ASCII
        "at=1,ep=1,s=1,one=1,g=1234567890123,c=1",
        "at=1,ep=1,s=1,one=1,g=1,c=1," + "x" * 500,
        "at=1,ep=1,s=1,one=1,g=1,c=1,tr=1,va=1,sz=1,ne=1,b=1,vp=1,m=$(reboot),f=yolov8,gf=1,ms=table",
        "at=1,ep=1,s=1,one=1,g=1,c=1,tr=1,va=1,sz=1,ne=1,b=1,vp=1,m=a b,f=yolov8,gf=1,ms=table",
        "at=1,ep=1,s=1,one=1,g=1,c=1,tr=1.5,va=1,sz=1,ne=1,b=1,vp=1,m=n,f=yolov8,gf=1,ms=table",
        "at=1\nep=1,s=1,one=1,g=1,c=1",
    ],
)
def test_anything_else_in_a_comment_is_no_summary(text: str) -> None:
    assert beacon.decode(text) is None
    assert beacon.decode(beacon.summary_text(HEAD + beacon.MARK + text)) is None


def test_a_summary_longer_than_any_written_is_not_kept() -> None:
    assert beacon.summary_text(HEAD + beacon.MARK + "a" * (beacon.MAX_CHARS + 1)) == ""
    assert beacon.summary_text("no mark here") == "" and beacon.summary_text(None) == ""


def test_what_cannot_be_said_plainly_is_not_written() -> None:
    b = beacon.Beacon(1, 1, float("nan"), True, 1, 1, None)
    assert beacon.encode(b) == "" and beacon.with_beacon(HEAD, b) == HEAD
