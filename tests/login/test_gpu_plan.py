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
from slurm_yolo.slurm import nodes

COCO = ["train", "model=yolov8s.yaml", "data=coco.yaml", "epochs=100", "imgsz=640", "batch=64"]


@pytest.fixture
def gpu_site(site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled config as a real site has it (docs/site-install.md): its a100 and t4 partitions are
    real cards on nodes with 8 CPUs per GPU (the config says so: no Slurm is asked), a v100 beside them,
    and the site's floor of 1 CPU per GPU the bundled config keeps."""
    text = "\n".join(ln for ln in site_config.read_text().splitlines() if not ln.startswith('gpu_like = "cpu"'))
    text = text.replace("[slurm]\n", f'[slurm]\nbin_dir = "{tmp_path / "no-slurm"}"\n')
    text += '\n[partitions.v100]\ngpu_type = "v100"\ngpus_per_node = 4\ncost_per_gpu_hour = 1.5\n'
    for name in ("a100", "t4", "v100"):
        text = text.replace(f"[partitions.{name}]\n", f"[partitions.{name}]\nnode_cpus_per_gpu = 8\n")
    site_config.write_text(text + "\n")
    monkeypatch.setattr(nodes, "slurm_shapes", lambda config: {})  # no Slurm here: the config alone
    return site_config


def run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(yolo_sbatch, args)
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def plan_json(*args: str) -> dict:
    res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # warnings go to stderr


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
    assert code == 0 and f"batch={fits} fits the prediction" in out, out  # past the prediction, within its error: said


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
    words = ["train", "model=yolov8s.yaml", "data=coco.yaml", "imgsz=640", "batch=32"]
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
    assert any(
        n.startswith("partition a100 is not calibrated: its jobs plan with GPU-type priors") for n in report["notes"]
    )
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
    assert plan_json("-p", "auto", *words)["partition"] != "a100"  # a free card finishes first
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


def test_a_site_plans_coco_from_the_cpus_that_feed_its_gpus(gpu_site: Path) -> None:
    """Issue 49's site: yolov8s on COCO for 100 epochs at batch 32 plans 7-16 hours on an A100 (the
    floor of 1 CPU per GPU no longer starves it), asks for the CPUs its loader needs within the node's 8
    per GPU and memory for them; a T4 takes 2-4x as long; yolov8n on COCO plans at most 12 hours."""
    words = ["train", "model=yolov8s.yaml", "data=coco.yaml", "epochs=100", "imgsz=640", "batch=32"]
    plans = {p: plan_json("-p", p, *words) for p in ("a100", "v100", "t4")}
    a100 = plans["a100"]
    assert 7 * 3600 <= a100["predicted_seconds"] <= 16 * 3600, a100["predicted_seconds"] / 3600
    assert 2 <= a100["cpus"] <= 8 and a100["cpus"] >= plans["t4"]["cpus"]
    assert a100["memory_mb"] >= 1024 * (3 + 0.5 * a100["cpus"])
    assert 2 <= plans["t4"]["predicted_seconds"] / a100["predicted_seconds"] <= 4
    assert plans["a100"]["predicted_seconds"] < plans["v100"]["predicted_seconds"] < plans["t4"]["predicted_seconds"]
    code, out = run(["--dry-run", "-p", "a100", *words])
    assert code == 0 and f"--cpus-per-task={a100['cpus']}" in out and f"--mem={a100['memory_mb']}M" in out, out
    assert "data loading bounds" not in out
    nano = plan_json("-p", "a100", "train", "model=yolov8n.yaml", "data=coco.yaml", "epochs=100", "imgsz=640")
    assert nano["predicted_seconds"] <= 12 * 3600 and nano["cpus"] == 8 and not nano["shard"], nano["cpus"]


def test_cpus_per_gpu_beyond_the_nodes_share_is_refused_in_one_line(gpu_site: Path) -> None:
    words = ["train", "model=yolov8n.yaml", "data=coco8.yaml", "imgsz=320"]
    code, out = run(["--dry-run", "--cpus-per-gpu", "9", "-p", "t4", *words])
    assert code != 0 and out.startswith("Error: --cpus-per-gpu 9: partition t4's nodes have 8 CPUs per GPU"), out
    assert "PartitionConfig" in out and len(out.strip().splitlines()) == 1
    assert plan_json("--cpus-per-gpu", "8", "-p", "t4", *words)["cpus"] == 8


def test_a_hyperthread_loads_at_a_cores_rate(gpu_site: Path, site_config: Path) -> None:
    """threads_per_core = 2: two Slurm CPUs are one core, so 2 CPUs per GPU load at one core's rate,
    and the plan asks for whole cores."""
    words = ["train", "model=yolov8n.yaml", "data=coco.yaml", "epochs=10", "imgsz=640"]
    one_core = plan_json("--cpus-per-gpu", "1", "-p", "a100", *words)
    site_config.write_text(
        site_config.read_text().replace("[partitions.a100]\n", "[partitions.a100]\nthreads_per_core = 2\n")
    )
    two_threads = plan_json("--cpus-per-gpu", "2", "-p", "a100", *words)
    assert two_threads["predicted_train_seconds"] == pytest.approx(one_core["predicted_train_seconds"])
    assert two_threads["cpus"] == 2
    own = plan_json("-p", "a100", *words)
    assert own["cpus"] % 2 == 0 and own["cpus"] <= 8


def test_memory_follows_the_loader_and_a_ram_cache(gpu_site: Path, site_config: Path) -> None:
    words = ["train", "model=yolov8s.yaml", "data=coco.yaml", "epochs=1", "imgsz=640", "batch=32"]
    plain = plan_json("-p", "a100", *words)
    cached = plan_json("-p", "a100", *words, "cache=ram")
    decoded_gb = (118287 + 5000) * 640**2 * 3 / 1e9  # COCO's train and val images, decoded at imgsz
    assert cached["memory_mb"] - plain["memory_mb"] == pytest.approx(decoded_gb * 1024, abs=256)
    site_config.write_text(
        site_config.read_text().replace("[partitions.a100]\n", "[partitions.a100]\nnode_memory_gb_per_gpu = 64.0\n")
    )
    capped = plan_json("-p", "a100", *words, "cache=ram")
    assert capped["memory_mb"] == 64 * 1024
    code, out = run(["--dry-run", "--explain", "-p", "a100", *words, "cache=ram"])
    assert "capped at the node's 64 GB (cache=ram will not fit" in out, out
    code, out = run(["--dry-run", "-p", "a100", "--sbatch-arg=--mem=100G", *words])
    assert code == 0 and "#SBATCH --mem=100G" in out and "--mem=" not in out.replace("--mem=100G", ""), out


def test_a_batch_past_the_card_within_the_memory_models_error_is_a_warning(gpu_site: Path) -> None:
    """Between the prediction and its measured low end (memory.low_ratio) the job is planned with a
    warning naming the largest batch that fits its prediction; only past the low end is it refused."""
    priors = gpu_priors.shipped()
    low = priors["memory"]["low_ratio"]
    assert 0 < low < 1
    base = ["train", "model=yolov8x.yaml", "data=coco.yaml", "imgsz=1280"]
    from slurm_yolo.core.model import estimate

    def need(batch: int) -> float:
        w = estimate.Workload(118287, 5000, 1280, 100, batch, 1, "yolov8x", "yolov8", 258.54)
        return gpu_priors.memory_gb(w, 1, 8.86, priors)

    warned = next(b for b in range(1, 200) if need(b) > 16 and need(b) * low <= 16)
    res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "-p", "t4", *base, f"batch={warned}"])
    assert res.exit_code == 0, res.output
    assert (
        f"batch={warned} at imgsz 1280 may not fit partition t4's" in res.output and "fits the prediction" in res.output
    )
    refused = next(b for b in range(1, 400) if need(b) * low > 16)
    code, out = run(["--dry-run", "-p", "t4", *base, f"batch={refused}"])
    assert code != 0 and out.startswith(f"Error: batch={refused} at imgsz 1280 needs about"), out


def test_doctor_names_a_partition_whose_nodes_starve_a_typical_job(gpu_site: Path, site_config: Path) -> None:
    site_config.write_text(
        site_config.read_text().replace(
            "[partitions.a100]\nnode_cpus_per_gpu = 8", "[partitions.a100]\nnode_cpus_per_gpu = 1"
        )
    )
    res = CliRunner().invoke(admin, ["doctor", "--role", "login", "--json"])
    problems = json.loads(res.output)["problems"]
    starved = [p for p in problems if "a typical job (yolov8s at imgsz 640, batch 16)" in p["what"]]
    assert [p["what"].split(":")[0] for p in starved] == ["partition a100"], problems
    assert "gets at most 1 CPUs per GPU" in starved[0]["what"] and "busy" in starved[0]["what"]
    assert "node_cpus_per_gpu" in starved[0]["fix"]
