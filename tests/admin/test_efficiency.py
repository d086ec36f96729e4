"""GPU efficiency and health from usage records as the launcher writes them (NVML figures per epoch),
hostile values among them: the report's efficiency view and plot, and the running-job alerts (no
cluster needed; tests/admin/test_admin.py runs the alerts on the real cluster)."""

from __future__ import annotations

import getpass
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from slurm_yolo.admin import efficiency, report
from slurm_yolo.core import config as config_mod

T = efficiency.Thresholds(low_util_pct=85.0, idle_minutes=30.0, temp_limit_c=85.0)
NOW = 1_800_000_000.0


def epoch(
    n: int,
    end: float,
    seconds: float,
    util: Any,
    mem: Any = 3.0,
    temp: Any = 60.0,
    images: int = 1000,
    total: Any = 40.0,
) -> dict[str, Any]:
    """One epoch record as the launcher writes it (``time``: when the epoch ended)."""
    return {
        "kind": "epoch",
        "time": end,
        "epoch": n,
        "epochs": 10,
        "images": images,
        "seconds": seconds,
        "gpu_util_pct": util,
        "gpu_mem_gb": mem,
        "gpu_mem_total_gb": total,
        "gpu_temp_c": temp,
    }


def test_a_jobs_use_is_weighted_by_epoch_time_and_hostile_figures_say_nothing() -> None:
    """Epochs of 100 s at 90% and 300 s at 50%: mean (90x100 + 50x300) / 400 = 60%, 300 of 400 s
    under 85%; peak memory 7.5 of 40 GB, hottest 83 C; 4,000 images in 400 s. The junk epochs (NaN, a
    string, a bool, 10^400, out of range) add nothing but their images where those are sound."""
    records = [
        {"kind": "start", "imgsz": 640, "epochs": 10, "batch": 32},
        epoch(1, NOW - 300, 100, 90, mem=7.5, temp=83),
        epoch(2, NOW, 300, 50.0, mem=2, images=3000),
        epoch(3, NOW, 0, float("nan"), mem="9", temp=True, images=0),
        epoch(4, NOW, -5, 10**400, mem=1e9, temp=500, images=-1),
        {"kind": "epoch", "epoch": "5", "seconds": 10, "gpu_util_pct": 0},  # an epoch number of text: skipped
    ]
    use = efficiency.summarize(records, 85.0)
    assert use is not None
    assert (use.seconds, use.low_seconds, use.util_pct) == (400, 300, 60.0)
    assert (use.mem_gb, use.mem_total_gb, use.temp_c, use.batch, use.images_per_s) == (7.5, 40.0, 83.0, 32, 10.0)
    assert use.low_share == 0.75
    assert efficiency.summarize([{"kind": "start", "batch": 8}, {"kind": "end"}], 85.0) is None


@pytest.mark.parametrize(
    ("mem", "util", "share", "fits"),
    [
        (9.0, 20.0, 0.25, True),
        (10.5, 20.0, 0.25, False),
        (9.0, 30.0, 0.25, False),
        (19.0, 45.0, 0.5, True),
    ],
)
def test_a_job_fits_a_share_of_a_gpu_by_its_memory_and_its_utilisation(
    mem: float, util: float, share: float, fits: bool
) -> None:
    use = efficiency.summarize([epoch(1, NOW, 60, util, mem=mem)], 85.0)
    assert use is not None and use.fits(share) is fits


def test_a_running_job_is_idle_only_when_every_epoch_of_the_window_was_under_the_line() -> None:
    """Epochs of 10 minutes: the last 30 minutes are covered by those ending in the window plus the
    one running into it."""
    minute = 60.0
    idle = [epoch(n, NOW - (5 - n) * 10 * minute, 10 * minute, 20) for n in range(1, 6)]
    [(kind, text)] = efficiency.running_alerts(idle, NOW, T)
    assert kind == "gpu-idle" and text.startswith("GPU utilisation 20% (under 85%) for the last 30 minutes")
    busy_once = [*idle[:-1], epoch(5, NOW, 10 * minute, 95)]
    assert efficiency.running_alerts(busy_once, NOW, T) == []
    young = idle[-2:]  # 20 minutes recorded: not yet 30
    assert efficiency.running_alerts(young, NOW, T) == []
    unknown = [*idle[:-1], epoch(5, NOW, 10 * minute, "idle")]  # a figure that says nothing: no judgement
    assert efficiency.running_alerts(unknown, NOW, T) == []
    off = efficiency.Thresholds(85.0, 0.0, 85.0)
    assert efficiency.running_alerts(idle, NOW, off) == []


def test_a_gpu_over_the_limit_in_the_latest_epoch_is_an_alert_an_earlier_one_is_not() -> None:
    hot = [epoch(1, NOW - 600, 600, 95, temp=70), epoch(2, NOW, 600, 95, temp=91.4)]
    assert efficiency.running_alerts(hot, NOW, T) == [("gpu-hot", "GPU at 91 C (over 85 C) in its latest epoch")]
    cooled = [epoch(1, NOW - 600, 600, 95, temp=91), epoch(2, NOW, 600, 95, temp=80)]
    assert efficiency.running_alerts(cooled, NOW, T) == []
    assert efficiency.running_alerts([epoch(1, NOW, 600, 95, temp=math.inf)], NOW, T) == []


def test_the_efficiency_view_and_its_plot_from_jobs_usage_records(site_config: Path, tmp_path: Path) -> None:
    """Two GPU jobs of the recorded sacct rows, their work dirs pointed at usage records written here:
    one busy, one that idles on a whole GPU (it would have fit a 1/4 shard: the bundled a100 has 4 per
    GPU). A third job's records are a link to them: not read (a work dir is the user's)."""
    cfg = config_mod.load()
    jobs, user = [101, 102, 103], getpass.getuser()
    rows = [
        [
            str(j),
            "vision",
            user,
            "a100",
            "normal",
            "COMPLETED",
            "2026-11-30T10:00:00",
            "2026-11-30T10:00:00",
            "2026-11-30T11:00:00",
            "3600",
            "120",
            "billing=1,cpu=1,gres/gpu=1,node=1",
            "yolo:eff=1",
            "",
            str(tmp_path / str(j)),
        ]
        for j in jobs
    ]
    runs = report.jobs(cfg, report.Filters(), rows)
    figures = {jobs[0]: (95.0, 30.0, 82.0), jobs[1]: (10.0, 4.0, 55.0)}
    for job in jobs:
        folder = tmp_path / str(job)
        folder.mkdir()
        path = folder / f"yolo-usage-{job}.jsonl"
        if job in figures:
            util, mem, temp = figures[job]
            lines = [{"kind": "start", "batch": 16}, epoch(1, NOW, 100, util, mem=mem, temp=temp)]
            path.write_text("".join(json.dumps(r) + "\n" for r in lines))
        else:
            path.symlink_to(tmp_path / str(jobs[0]) / f"yolo-usage-{jobs[0]}.jsonl")
    view = report.build(cfg, report.Filters(), views=("efficiency",), df=runs)["efficiency"]
    assert list(view["job_id"]) == sorted(figures)
    busy, idle = (view[view["job_id"] == j].iloc[0] for j in jobs[:2])
    assert (busy["gpu_hours"], busy["util_pct"], busy["low_util_gpu_hours"], busy["fits_shard"]) == (
        1.0,
        95.0,
        0.0,
        False,
    )
    assert (idle["gpu_hours"], idle["low_util_gpu_hours"], idle["fits_shard"]) == (1.0, 1.0, True)
    assert (idle["mem_gb"], idle["mem_total_gb"], idle["temp_c"], idle["batch"], idle["images_per_s"]) == (
        4.0,
        40.0,
        55.0,
        16,
        10.0,
    )
    from slurm_yolo.admin.report import output

    text = output.table({"efficiency": view})
    assert "GPU util" in text and "GPU-hours under-used" in text and "fits a shard" in text
    images = output.plots({"efficiency": view})
    assert set(images) == {"efficiency"}


def test_the_launcher_records_what_the_efficiency_view_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """``launcher.GpuUsage`` between two epochs, over NVML's Python API as nvidia-ml-py names it (no GPU
    here: a stand-in module answers for two GPUs, the training on the second): peak memory of the
    training's processes, the GPU's memory, mean utilisation and the hottest temperature, then a
    fresh start. No machine here has a GPU; the real NVML is only on one that does."""
    import sys
    import types

    from slurm_yolo.job import launcher

    proc = types.SimpleNamespace
    temps = iter([71.0, 84.0])
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = type("NVMLError", (Exception,), {})  # type: ignore[attr-defined]
    nvml.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    nvml.nvmlInit = lambda: None  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [proc(pid=7, usedGpuMemory=(h * 3 + 0) * 10**9)]  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: proc(total=80 * 10**9)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetUtilizationRates = lambda h: proc(gpu=40 + 10 * h)  # type: ignore[attr-defined]
    nvml.nvmlDeviceGetTemperature = lambda h, sensor: next(temps)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    gpu = launcher.GpuUsage()
    gpu.sample({7})
    gpu.sample({7})
    rec = gpu.take()
    assert rec == {"gpu_mem_gb": 3.0, "gpu_mem_total_gb": 80.0, "gpu_util_pct": 50.0, "gpu_temp_c": 84.0}
    assert gpu.take() == {}
    use = efficiency.summarize([{"kind": "epoch", "epoch": 1, "seconds": 10, "images": 10, **rec}], 85.0)
    assert use is not None and (use.util_pct, use.mem_gb, use.mem_total_gb, use.temp_c) == (50.0, 3.0, 80.0, 84.0)


def test_records_a_user_shapes_neither_raise_nor_hide_the_rest() -> None:
    """Two epochs alike to the second (sorting must not compare the records), one parked in the
    future (left out: it would be "recent" and "latest" forever), an epoch that claims 10^12 images in
    10^-300 s (no speed), and a heat figure read from the epoch that ended last."""
    alike = [epoch(n, NOW, 60.0, 90.0) for n in (1, 2)]
    assert efficiency.running_alerts(alike, NOW, T) == []
    idle = [epoch(n, NOW - (5 - n) * 600, 600, 5) for n in range(1, 6)]
    parked = [*idle, epoch(99, 1e11, 60, 100, temp=20)]
    assert [kind for kind, _ in efficiency.running_alerts(parked, NOW, T)] == ["gpu-idle"]
    late_cool = [epoch(1, NOW - 60, 10, 95, temp=110), epoch(2, NOW, 1000, 95, temp=30)]
    assert efficiency.running_alerts(late_cool, NOW, T) == []  # the 110 C epoch began later, ended first
    fast = [epoch(1, NOW, 1e-300, 95, images=10**12), epoch(2, NOW, 100, 95, images=1000)]
    use = efficiency.summarize(fast, 85.0)
    assert use is not None and use.images_per_s == 10.0


def test_random_hostile_records_never_raise() -> None:
    """Any JSON-shaped junk a user can write, in any place of an epoch record."""
    import random

    rng = random.Random(7)
    junk = [
        None,
        True,
        False,
        0,
        -1,
        2**70,
        -(2**70),
        1e308,
        -1e308,
        float("nan"),
        float("inf"),
        "",
        "x",
        "90",
        [],
        [1],
        {},
        {"a": 1},
        1e-300,
        NOW,
        NOW + 1e9,
    ]
    keys = [
        "kind",
        "time",
        "epoch",
        "seconds",
        "images",
        "gpu_util_pct",
        "gpu_mem_gb",
        "gpu_mem_total_gb",
        "gpu_temp_c",
        "batch",
    ]
    for _ in range(2000):
        records = []
        for _ in range(rng.randrange(0, 6)):
            rec: dict[str, Any] = {"kind": rng.choice(["epoch", "start", "end", None]), "epoch": rng.randrange(3)}
            for key in rng.sample(keys, rng.randrange(len(keys))):
                rec[key] = rng.choice(junk)
            records.append(rec)
        efficiency.running_alerts(records, NOW, T)
        use = efficiency.summarize(records, 85.0)
        if use is not None and use.util_pct is not None:
            assert 0 <= use.util_pct <= 100


def test_the_plot_names_the_commonest_batch_sizes_and_the_rest_as_one() -> None:
    """A user's 300 jobs of 300 batch sizes make no 300-entry legend (a page as tall as a wall)."""
    import matplotlib
    import pandas as pd

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from slurm_yolo.admin.report import output

    view = pd.DataFrame(
        {
            "mem_gb": [1.0 + i / 100 for i in range(300)],
            "images_per_s": [100.0] * 300,
            "batch": pd.array([2] * 5 + list(range(10, 305)), dtype="Int64"),
        }
    )
    fig = output.PLOTS["efficiency"](plt, view, None)
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert len(labels) == output.PLOT_BATCHES + 1 and "batch 2" in labels and labels[-1] == "other batch sizes"
    plt.close(fig)


def test_a_saved_sacct_file_s_nul_in_a_work_dir_or_user_reads_nothing() -> None:
    """Real sacct prints no NUL; a saved file may hold one: no record, no traceback."""
    from slurm_yolo.parse.records import job_records

    assert job_records("/tmp/w\x00x", 1, getpass.getuser()) == []
    assert job_records("/tmp", 1, "ali\x00ce") == []


def test_slurms_own_gpu_accounting_where_a_site_gathers_it(site_config: Path, tmp_path: Path) -> None:
    """sacct's ``gres/gpuutil`` and ``gres/gpumem`` (a site with AccountingStorageTRES=gres/gpumem,
    gres/gpuutil and the NVML GPU plugin; the bundled cluster's fake GPUs gather none: strings as
    Slurm prints them), beside the usage records: a job without records takes its figures from there
    (utilisation only for one GPU: Slurm's figure for several is not one GPU's), hostile or broken
    figures are no figures."""
    from slurm_yolo.slurm import parsers

    ave = "cpu=00:52:45,energy=0,fs/disk=40397700700,gres/gpumem=0,gres/gpuutil=43,mem=3096K,pages=0,vmem=0"
    peak = "cpu=00:52:45,energy=0,fs/disk=40397700700,gres/gpumem=21794M,gres/gpuutil=100,mem=3096K,pages=0,vmem=0"
    assert parsers.step_gpu(ave, peak) == parsers.StepGpu(43.0, 21794 / 1024)
    assert parsers.step_gpu("cpu=00:00:01,mem=10K", "cpu=00:00:01,mem=10K") is None  # no GPU accounting
    assert parsers.step_gpu("gres/gpuutil=1e9", "gres/gpumem=12X") is None
    assert parsers.step_gpu("gres/gpuutil=7000", "gres/gpumem=1G") == parsers.StepGpu(None, 1.0)
    cfg = config_mod.load()
    user = getpass.getuser()
    rows = [
        [
            str(j),
            "vision",
            user,
            "a100",
            "normal",
            "COMPLETED",
            "2026-11-30T10:00:00",
            "2026-11-30T10:00:00",
            "2026-11-30T11:00:00",
            "3600",
            "120",
            f"billing=1,cpu=1,gres/gpu={g},node=1",
            "yolo:eff=1",
            "",
            str(tmp_path / str(j)),
        ]
        for j, g in ((201, 1), (202, 2), (203, 1))
    ]
    runs = report.jobs(cfg, report.Filters(), rows)
    slurm = {201: parsers.StepGpu(30.0, 2.5), 202: parsers.StepGpu(150.0, 60.0)}
    view = report.efficiency(runs, cfg, lambda *_: [], slurm)
    assert list(view["job_id"]) == [201, 202]  # 203: neither records nor Slurm's figures
    one, two = view.iloc[0], view.iloc[1]
    assert (one["util_pct"], one["low_util_gpu_hours"], one["mem_gb"], one["slurm_gpuutil"]) == (30.0, 1.0, 2.5, 30.0)
    assert pd.isna(two["util_pct"]) and (two["gpu_hours"], two["low_util_gpu_hours"], two["mem_gb"]) == (2.0, 0.0, 60.0)
    assert (two["slurm_gpuutil"], two["slurm_gpumem_gb"]) == (150.0, 60.0)
