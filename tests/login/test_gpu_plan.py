"""Plans on a GPU site's first day: GPU-type priors, GPU memory, AutoBatch, the loader, the cheapest card."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core.model import gpu_priors

COCO = ["train", "model=yolov8s.yaml", "data=coco.yaml", "epochs=100", "imgsz=640", "batch=64"]


@pytest.fixture
def gpu_site(site_config: Path) -> Path:
    """The bundled config as a real site has it: its a100 and t4 partitions are real cards, and its
    jobs get 8 CPUs per GPU (the bundled clusters' small nodes give 1)."""
    text = "\n".join(ln for ln in site_config.read_text().splitlines() if not ln.startswith('gpu_like = "cpu"'))
    site_config.write_text(text.replace("cpus_per_gpu = 1", "cpus_per_gpu = 8") + "\n")
    return site_config


def run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(yolo_sbatch, args)
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def plan_json(*args: str) -> dict:
    code, out = run(["--dry-run", "--json", *args])
    assert code == 0, out
    return json.loads(out)


def test_an_uncalibrated_a100_plans_coco_in_hours_and_a_t4_two_to_four_times_longer(gpu_site: Path) -> None:
    """100 COCO epochs of yolov8s at batch 64: a limit of 7-30 hours on an uncalibrated A100 (the
    prediction doubled while the partition is uncalibrated), no longer "more than a year"."""
    a100 = plan_json("-p", "a100", *COCO)
    assert 7 * 3600 <= a100["time_limit_seconds"] <= 30 * 3600, a100["time_limit_seconds"] / 3600
    assert a100["time_limit_seconds"] == math.ceil(2 * a100["predicted_seconds"] / 60) * 60
    t4 = plan_json("-p", "t4", *COCO[:-1], "batch=32")  # 64 images of 640 px do not fit a 16 GB card
    a100_32 = plan_json("-p", "a100", *COCO[:-1], "batch=32")
    assert 2 <= t4["predicted_seconds"] / a100_32["predicted_seconds"] <= 4
    code, out = run(["--dry-run", "--explain", "-p", "a100", *COCO])
    assert code == 0, out
    assert "GPU-type priors for NVIDIA A100 40GB" in out and "uncalibrated partition" in out


def test_cheapest_is_the_partition_whose_money_is_lower(gpu_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_yolo.slurm import commands, parsers

    monkeypatch.setattr(
        commands,
        "will_run",  # Slurm would start either now
        lambda scripts, bin_dir=None, timeout=30.0: [parsers.WillRun(int(time.time())) for _ in scripts],
    )
    words = [*COCO[:-1], "batch=32"]
    chosen = plan_json("-p", "auto", "--prefer", "cheapest", *words)
    money = {p: plan_json("-p", p, *words)["expected_charge_money"] for p in ("a100", "t4")}
    assert chosen["partition"] == min(money, key=lambda p: money[p]) == "t4", money
    assert plan_json("-p", "auto", *words)["partition"] == "a100"  # soonest: the faster card


def test_a_plan_that_cannot_fit_its_card_is_refused_with_a_batch_that_fits(gpu_site: Path) -> None:
    code, out = run(
        ["--dry-run", "-p", "t4", "train", "model=yolov8x.yaml", "data=coco.yaml", "imgsz=1280", "batch=64"]
    )
    assert code != 0 and out.startswith("Error: batch=64 at imgsz 1280 needs about"), out
    assert len(out.strip().splitlines()) == 1
    fits = int(out.split("batch=")[2].split(" ")[0])
    assert 1 <= fits < 64
    ok = plan_json("-p", "t4", "train", "model=yolov8x.yaml", "data=coco.yaml", "imgsz=1280", f"batch={fits}")
    assert ok["workload"]["batch"] == fits
    code, out = run(
        ["--dry-run", "-p", "t4", "train", "model=yolov8x.yaml", "data=coco.yaml", "imgsz=1280", f"batch={fits + 1}"]
    )
    assert code != 0, out


def test_autobatch_is_planned_at_the_batch_it_would_pick_on_that_card(gpu_site: Path) -> None:
    on = {
        p: plan_json("-p", p, "train", "model=yolov8s.yaml", "data=coco.yaml", "batch=-1")["workload"]["batch"]
        for p in ("a100", "t4")
    }
    priors = gpu_priors.shipped()
    for p, memory in (("a100", 40.0), ("t4", 16.0)):
        m = priors["memory"]  # AutoBatch's profile counts autobatch_ratio of a training step's memory per image
        per_image = m["per_image_gb"] * m["autobatch_ratio"] * (28.81 / 8.86) ** m["model_exponent"]
        assert on[p] == int((memory * 0.6 - priors["memory"]["base_gb"]) / per_image)
    assert on["a100"] > on["t4"] > 16
    fraction = plan_json("-p", "a100", "train", "model=yolov8s.yaml", "data=coco.yaml", "batch=0.9")
    assert fraction["workload"]["batch"] > on["a100"]
    code, out = run(
        ["--dry-run", "--explain", "-p", "a100", "train", "model=yolov8s.yaml", "data=coco.yaml", "batch=-1"]
    )
    assert code == 0, out
    assert f"AutoBatch would pick {on['a100']}" in out


def test_a_job_its_cpus_cannot_feed_says_so_with_the_cpus_that_would(gpu_site: Path) -> None:
    words = ["train", "model=yolov8n.yaml", "data=coco.yaml", "imgsz=320", "batch=64"]
    code, out = run(["--dry-run", "--cpus-per-gpu", "1", "-p", "a100", *words])
    assert code == 0, out
    line = next(ln for ln in out.splitlines() if "data loading bounds this run" in ln)
    need = int(line.split("--cpus-per-gpu ")[1].split(" ")[0])
    assert need > 1
    code, out = run(["--dry-run", "--cpus-per-gpu", str(need), "-p", "a100", *words])
    assert code == 0 and "data loading bounds" not in out, out
    assert f"--cpus-per-task={need}" in out or f"--cpus-per-task {need}" in out


def test_an_unknown_card_says_so_and_device_nodes_keep_the_cpu_priors(gpu_site: Path, site_config: Path) -> None:
    site_config.write_text(site_config.read_text() + '\n[partitions.mi]\ngpu_type = "mi250"\n')
    code, out = run(["--dry-run", "--explain", "-p", "mi", "train", "model=yolov8n.yaml", "data=coco8.yaml"])
    assert code == 0 and "GPU type mi250 is not known" in out and "partitions.mi.gpu_like" in out, out
    res = CliRunner().invoke(admin, ["doctor", "--role", "login", "--json"])
    report = json.loads(res.output)
    assert any("mi250 is not known" in p["what"] for p in report["problems"])
    assert any(n.startswith("partition a100 plans with GPU-type priors") for n in report["notes"])
    site_config.write_text(site_config.read_text() + '\n[partitions.fake]\ngpu_type = "a100"\ngpu_like = "cpu"\n')
    code, out = run(["--dry-run", "--explain", "-p", "fake", "train", "model=yolov8n.yaml", "data=coco8.yaml"])
    assert code == 0 and "time model: shipped priors (the corpus' shape" in out, out


def test_fastest_is_the_shortest_run_whatever_the_queue(gpu_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slurm_yolo.slurm import commands, parsers

    def busy_a100(scripts: list[str], bin_dir: object = None, timeout: float = 30.0) -> list[parsers.WillRun]:
        now = int(time.time())  # the a100 queue is 30 hours long, the t4 free
        return [parsers.WillRun(now + (30 * 3600 if "--partition=a100" in s else 0)) for s in scripts]

    monkeypatch.setattr(commands, "will_run", busy_a100)
    words = [*COCO[:-1], "batch=32"]
    assert plan_json("-p", "auto", *words)["partition"] == "t4"  # finishes first
    fastest = plan_json("-p", "auto", "--prefer", "fastest", *words)
    assert fastest["partition"] == "a100"
    assert fastest["predicted_seconds"] < plan_json("-p", "t4", *words)["predicted_seconds"]


def test_a_mig_slice_holds_its_own_memory_and_computes_at_its_share(gpu_site: Path, site_config: Path) -> None:
    site_config.write_text(
        site_config.read_text() + '\n[partitions.mig]\ngpu_type = "a100_1g.5gb"\ngpus_per_node = 7\n'
    )
    words = ["train", "model=yolov8s.yaml", "data=coco.yaml", "epochs=1", "imgsz=640"]
    code, out = run(["--dry-run", "-p", "mig", *words, "batch=32"])
    assert code != 0 and "partition mig's NVIDIA A100 40GB has 5 GB" in out, out
    fits = int(out.split("batch=")[2].split(" ")[0])
    slice_plan = plan_json("-p", "mig", *words, f"batch={fits}")
    whole = plan_json("-p", "a100", *words, f"batch={fits}")
    assert slice_plan["predicted_train_seconds"] > 3 * whole["predicted_train_seconds"]  # 1 of 7 slices


def test_a_light_job_whose_memory_a_shard_cannot_hold_takes_a_whole_gpu(gpu_site: Path, site_config: Path) -> None:
    """A shard is a share of the card's memory too (light.gpu_share: 2 of 4 shards, 4 GB of an 8 GB
    card): a light model whose batch needs more gets the whole GPU, not a shard it would not fit in."""
    site_config.write_text(
        site_config.read_text() + '\n[partitions.small]\ngpu_type = "t4"\ngpu_memory_gb = 8.0\nshards_per_gpu = 4\n'
    )
    tiny = plan_json("-p", "small", "train", "model=yolov8n.yaml", "data=coco8.yaml", "imgsz=320", "batch=16")
    assert tiny["shard"] and tiny["gres"] == "shard:t4:2"
    light = plan_json("-p", "small", "train", "model=yolov8s.yaml", "data=coco8.yaml", "imgsz=640", "batch=16")
    assert not light["shard"] and light["gres"] == "gpu:t4:1"  # ~6 GB: light by FLOPs and pixels, not by memory
