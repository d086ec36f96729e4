"""Parser inputs that need no training: the seeds' format, usage records, binary and enormous logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_yolo import parse as parse_mod
from slurm_yolo.parse import parse_path


def test_seeds_format(tmp_path: Path) -> None:
    log = tmp_path / "seeds.log"
    log.write_text("".join(f"Epoch {e}/99 GPU_mem: 7.23G box: 1.2 ips: {140 + e}.5\n" for e in range(1, 50)))
    r = parse_path(log)
    assert r.source == "stdout" and r.epochs_completed == 49 and r.epochs_total == 99 and r.partial
    assert r.per_epoch[0].gpu_mem_gb == 7.23 and r.per_epoch[-1].images_per_s == 189.5
    assert r.images_per_s == pytest.approx(sum(140 + e + 0.5 for e in range(1, 50)) / 49)


def test_usage_records(tmp_path: Path) -> None:
    f = tmp_path / "yolo-usage-7.jsonl"
    values = {"train/box_loss": 1.5, "metrics/mAP50(B)": 0.25, "val/box_loss": 1.7, "lr/pg0": 0.01}  # as results.csv
    recs = (
        [{"kind": "start", "imgsz": 64, "epochs": 3}]
        + [
            {
                "kind": "epoch",
                "epoch": e,
                "epochs": 3,
                "images": 16,
                "tokens": 16 * 64**2,
                "seconds": 2.0,
                "gpu_mem_gb": 1.5,
                "metrics": values,
            }
            for e in (1, 2)
        ]
        + [{"kind": "epoch", "epoch": 3, "epochs": 3, "images": 16, "seconds": 2.0, "metrics": [1, 2]}]
    )
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n{broken\n")
    r = parse_path(tmp_path)  # the folder: records are preferred
    assert r.source == "usage-records" and r.epochs_completed == 2 and r.epochs_total == 3 and r.partial
    assert r.per_epoch[0].images_per_s == 8.0 and r.per_epoch[0].mpx_per_s == pytest.approx(16 * 64**2 / 2 / 1e6)
    assert r.mpx_per_s == pytest.approx(16 * 64**2 / 2 / 1e6) and "2 unreadable" in r.warnings[0]  # and epoch 3
    assert (r.per_epoch[0].losses, r.per_epoch[0].metrics) == ({"train/box_loss": 1.5}, {"metrics/mAP50(B)": 0.25})


def test_binary_and_missing(tmp_path: Path) -> None:
    b = tmp_path / "b.log"
    b.write_bytes(bytes(range(256)) * 100)
    r = parse_path(b)
    assert r.partial and r.epochs_completed == 0 and any("binary" in w for w in r.warnings)
    assert parse_path(tmp_path / "nope.log").source == "none"
    assert parse_path(tmp_path / "empty-dir-free").partial


def test_enormous_log_reads_its_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parse_mod, "MAX_BYTES", 100_000)
    big = tmp_path / "big.log"
    big.write_text("x" * 500_000 + "\n" + "Epoch 5/9 GPU_mem: 1.0G ips: 10.0\n")
    r = parse_path(big)
    assert r.epochs_completed == 5 and any("read its last" in w for w in r.warnings)
