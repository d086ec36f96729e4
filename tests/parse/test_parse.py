"""The job-step parser on real ultralytics logs the tests produce, results.csv, the seeds' format, and fuzz."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.parse import parse_path
from slurm_yolo.parse.stdout import parse_stdout

YOLO = str(Path(sys.executable).parent / "yolo")


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory, dataset: Path, yolo_env: dict[str, str]) -> dict[str, Path]:
    """Real ultralytics stdout: plain (non-TTY, yolov8n) and under a pseudo-terminal (80 columns, yolo26n)."""
    root = tmp_path_factory.mktemp("logs")
    args = [
        f"data={dataset}",
        "imgsz=64",
        "batch=8",
        "pretrained=False",
        "workers=0",
        "device=cpu",
        "plots=False",
        f"project={root}",
        "exist_ok=True",
    ]
    plain = root / "plain.log"
    with open(plain, "w") as f:
        subprocess.run(
            [YOLO, "detect", "train", "model=yolov8n.yaml", "epochs=3", "name=plain", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=yolo_env,
            check=True,
            timeout=300,
        )
    pty = root / "pty.log"
    cmd = " ".join([YOLO, "detect", "train", "model=yolo26n.yaml", "epochs=2", "name=pty", *args])
    subprocess.run(
        ["script", "-qfec", f"stty cols 80; {cmd}", str(pty)],
        env=yolo_env,
        check=True,
        timeout=300,
        stdout=subprocess.DEVNULL,
    )
    return {"plain": plain, "pty": pty, "run": root / "plain"}


pytestmark = pytest.mark.train


def test_plain_log(logs: dict[str, Path]) -> None:
    r = parse_stdout(logs["plain"])
    assert r.source == "stdout" and (r.epochs_completed, r.epochs_total) == (3, 3) and not r.partial
    assert [e.epoch for e in r.per_epoch] == [1, 2, 3]
    for e in r.per_epoch:
        assert e.seconds and e.seconds > 0 and e.images == 16 and e.gpu_mem_gb == 0.0
        assert e.images_per_s == pytest.approx(16 / e.seconds)
        assert e.mpx_per_s == pytest.approx(16 * 64**2 / e.seconds / 1e6)
        assert set(e.losses) == {"box_loss", "cls_loss", "dfl_loss"}
        assert "mAP50-95" in e.metrics
    assert r.images_per_s and r.train_seconds == pytest.approx(sum(e.seconds or 0 for e in r.per_epoch))


def test_pty_log_cut_at_terminal_width(logs: dict[str, Path]) -> None:
    raw = logs["pty"].read_text(errors="replace")
    assert "…" in raw  # the frames really are cut
    r = parse_stdout(logs["pty"])
    assert (r.epochs_completed, r.epochs_total) == (2, 2)
    assert all(e.seconds and e.images_per_s for e in r.per_epoch)


def test_results_csv_alone(logs: dict[str, Path], tmp_path: Path) -> None:
    shutil.copy(logs["run"] / "results.csv", tmp_path / "results.csv")
    r = parse_path(tmp_path / "results.csv")
    assert r.source == "results.csv" and r.epochs_completed == 3 and r.train_seconds
    assert all(e.seconds is not None for e in r.per_epoch)
    with_args = parse_path(logs["run"])  # the run folder: args.yaml gives images and tokens
    assert with_args.source == "results.csv" and with_args.images_per_s and with_args.mpx_per_s


def test_cli_json(logs: dict[str, Path]) -> None:
    res = CliRunner().invoke(admin, ["parse", "--json", str(logs["plain"])])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert {"source", "epochs_completed", "epochs_total", "per_epoch", "images_per_s"} <= set(d)
    assert {"epoch", "seconds", "images_per_s", "mpx_per_s", "gpu_mem_gb"} <= set(d["per_epoch"][0])


def test_truncated_and_interleaved(logs: dict[str, Path], tmp_path: Path) -> None:
    data = logs["plain"].read_bytes()
    cut = tmp_path / "cut.log"
    cut.write_bytes(data[: data.index(b"3/3 ") + 20])  # dies early in epoch 3
    r = parse_stdout(cut)
    assert r.partial and r.epochs_completed == 2 and r.epochs_total == 3
    a, b = data.splitlines(keepends=True), logs["pty"].read_bytes().splitlines(keepends=True)
    mixed = tmp_path / "ddp.log"
    mixed.write_bytes(b"".join(x for pair in zip(a, b, strict=False) for x in pair))
    assert parse_stdout(mixed).epochs_completed >= 1


def test_fuzz_thousands_of_mutated_logs(logs: dict[str, Path], tmp_path: Path) -> None:
    base = logs["plain"].read_bytes() + logs["pty"].read_bytes()
    rng = random.Random(5)
    path = tmp_path / "m.log"
    for _ in range(2000):
        data = bytearray(base)
        for _ in range(rng.randint(1, 12)):
            op, at = rng.random(), rng.randrange(len(data))
            if op < 0.3:
                del data[at : at + rng.randint(1, 400)]
            elif op < 0.6:
                data[at:at] = rng.randbytes(rng.randint(1, 64))
            elif op < 0.8:
                data[at:at] = data[rng.randrange(len(data)) :][: rng.randint(1, 300)]
            else:
                data[at : at + 1] = rng.choice([b"\r", b"\n", b"\x1b[K", b"/", b":", b"%", b"\x00", b"\xff"])
        path.write_bytes(bytes(data))
        r = parse_stdout(path)
        assert r.epochs_completed >= 0 and json.dumps(r.to_dict())
