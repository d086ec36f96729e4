"""``calibrate`` compares its fit with the current model before any save (issue 47): a preview that
saves nothing, a worse fit refused without --force, samples listed, shared nodes weighed down, users'
and jobs' runs excluded. No cluster: run folders are stood in for by their samples."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import calibration_rows

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.core import config as config_mod
from slurm_yolo.core import spec
from slurm_yolo.core.model import estimate
from slurm_yolo.core.model.timemodel import Sample, TimeModel, predict_seconds, predict_train_seconds
from slurm_yolo.slurm import occupancy
from slurm_yolo.state import calibration

NOBODY = 65534


def workloads(n: int, seed: int = 1) -> list[estimate.Workload]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        name = rng.choice(["yolov8n", "yolov8s", "yolov8m"])
        imgsz, images, epochs = rng.choice([320, 480, 640]), rng.choice([200, 800, 3000]), rng.choice([3, 10, 30])
        m = estimate.lookup_model(name)
        assert m is not None
        words = ["train", f"model={name}.pt", "data=d.yaml", f"epochs={epochs}", f"imgsz={imgsz}"]
        out.append(estimate.workload(spec.parse(words), images, max(1, images // 5), m))
    return out


def folder_samples(truth: TimeModel, folders: list[Path], noise: float = 0.05, seed: int = 2) -> dict[str, Sample]:
    """Run folders' samples (training time by ``truth``, with ``noise``), by folder."""
    rng = random.Random(seed)
    out = {}
    for w, folder in zip(workloads(len(folders), seed), folders, strict=True):
        seconds = predict_train_seconds(w, truth, 1, 0.9, 8.86, 4) * math_noise(rng, noise)
        out[str(folder)] = Sample(w, 1, seconds, str(folder.resolve()), cpus=4)
    return out


def math_noise(rng: random.Random, noise: float) -> float:
    return 1.0 + rng.uniform(-noise, noise)


@pytest.fixture
def cfg(site_config: Path, monkeypatch: pytest.MonkeyPatch) -> config_mod.Config:
    monkeypatch.setattr(calibration, "shared_nodes", lambda *a: ({}, ""))  # no Slurm here
    return config_mod.load(site_config)


def folders(tmp_path: Path, n: int, name: str = "train") -> list[Path]:
    out = []
    for i in range(n):
        (tmp_path / f"{name}{i}").mkdir()
        out.append(tmp_path / f"{name}{i}")
    return out


def stand_in(monkeypatch: pytest.MonkeyPatch, samples: dict[str, Sample]) -> None:
    monkeypatch.setattr(calibration, "sample_from_run_dir", lambda path, config: samples[str(path)])


def truth_of(cfg: config_mod.Config) -> TimeModel:
    return replace(calibration.prior(cfg, "t4"), k=0.8)


def test_a_dry_run_compares_and_saves_nothing(
    cfg: config_mod.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = folders(tmp_path, 6)
    stand_in(monkeypatch, folder_samples(truth_of(cfg), runs))
    with calibration.Store(cfg) as store:
        store.save("t4", replace(truth_of(cfg), k=4.0, n=3), "calibrate by root: 3 runs")
    before = calibration_rows(cfg)
    res = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--dry-run", *map(str, runs)])
    assert res.exit_code == 0, res.output
    assert calibration_rows(cfg) == before and calibration.history(cfg, "t4")[-1].source == "calibrate by root: 3 runs"
    out = res.stdout
    assert "partition t4: 6 new run(s) read, not added; its samples, all in the fit: 6 from run folders" in out
    assert "compared on all 6 runs in the fit" not in out  # the current model was fitted: judged on the new runs
    assert "compared on the 6 runs recorded since t4's model was last fitted (" in out
    lines = out.splitlines()
    current = next(line for line in lines if line.strip().startswith("current model"))
    new = next(line for line in lines if line.strip().startswith("new fit"))
    assert current.split()[2] == "6" and new.split()[2] == "6"
    assert float(current.split()[3].rstrip("%")) > float(new.split()[3].rstrip("%"))  # k 4 vs 0.8: much worse
    refs = [line for line in lines if line.startswith("  yolov8")]
    assert [r.split(",")[0].strip() for r in refs] == ["yolov8n 640 px", "yolov8s 640 px", "yolov8m 640 px"]
    assert all(" -> " in r and r.endswith("%)") for r in refs)
    assert lines[-1] == "dry run: nothing saved"
    listed = [line for line in lines if line.startswith("  run folder ")]
    assert len(listed) == 6 and all("; user root; new" in line for line in listed)


def test_a_worse_fit_is_refused_without_force_and_saved_with_it(
    cfg: config_mod.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The current model is the truth the runs were timed by (with noise): any fit of them predicts
    them worse, cross-validated, than it does."""
    truth = truth_of(cfg)
    runs = folders(tmp_path, 8)
    stand_in(monkeypatch, folder_samples(truth, runs, noise=0.3))
    with calibration.Store(cfg) as store:
        store.save("t4", replace(truth, n=20), "calibrate by root: 20 runs")
    before = calibration_rows(cfg)
    res = CliRunner().invoke(admin, ["calibrate", "-p", "t4", *map(str, runs)])
    assert res.exit_code == 1, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("Error: partition t4: the new fit's cross-validated error (median ")
    assert last.endswith("on the same 8 runs: not saved (--force saves it)")
    assert calibration_rows(cfg) == before  # neither the fit nor its runs
    dry = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--dry-run", "--json", *map(str, runs)])
    got = json.loads(dry.stdout)
    assert dry.exit_code == 0 and not got["saved"] and got["comparison"]["worse"].endswith("(--force saves it)")
    assert got["comparison"]["new"]["median"] > got["comparison"]["current"]["median"]
    assert calibration_rows(cfg) == before
    forced = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--force", "--json", *map(str, runs)])
    assert forced.exit_code == 0, forced.output
    source = calibration.history(cfg, "t4")[-1].source
    assert source.startswith("calibrate by root: 8 runs (forced over a worse cross-validated error: ")
    assert json.loads(forced.stdout)["source"] == source


def test_a_better_fit_is_saved_and_the_history_names_its_cause(
    cfg: config_mod.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = folders(tmp_path, 5)
    stand_in(monkeypatch, folder_samples(truth_of(cfg), runs))
    res = CliRunner().invoke(admin, ["calibrate", "-p", "t4", *map(str, runs)])
    assert res.exit_code == 0, res.output
    assert "compared on all 5 runs in the fit (the current model, " in res.stdout  # the prior: fitted on none
    (entry,) = calibration.history(cfg, "t4")
    assert entry.source == "calibrate by root: 5 runs"
    assert res.stdout.strip().endswith("saved; the history names it: calibrate by root: 5 runs")
    again = CliRunner().invoke(admin, ["calibrate", "-p", "t4", *map(str, runs)])  # nothing new: no verdict
    assert again.exit_code == 0 and "too few to judge the fit by" in again.stdout, again.output


def job_sample(w: estimate.Workload, seconds: float, job: int, uid: int) -> tuple[Sample, int]:
    return Sample(w, 1, seconds * 0.9, f"job:yolo:{job}", seconds, 4, owner=uid), uid


def test_excluded_users_and_jobs_stay_out_of_this_and_later_fits(
    cfg: config_mod.Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = truth_of(cfg)
    ws = workloads(9, seed=5)
    jobs = [job_sample(w, predict_seconds(w, truth, 1, 0.9, 8.86, 4), 100 + i, 0) for i, w in enumerate(ws[:6])]
    forged = [
        job_sample(w, predict_seconds(w, truth, 1, 0.9, 8.86, 4) * 10, 200 + i, NOBODY) for i, w in enumerate(ws[6:])
    ]
    with calibration.Store(cfg) as store:
        for s, uid in jobs + forged:
            store.add_sample("t4", s, "job", uid)
    res = CliRunner().invoke(
        admin, ["calibrate", "-p", "t4", "--exclude-user", "nobody", "--exclude-job", "101", "--json"]
    )
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    why = {s["job"]: s["excluded"] for s in got["samples"]}
    assert why == {100: "", 101: "--exclude-job 101", 102: "", 103: "", 104: "", 105: ""} | dict.fromkeys(
        (200, 201, 202), "--exclude-user nobody"
    )
    assert {s["user"] for s in got["samples"] if s["job"] >= 200} == {"nobody"}
    assert got["model"]["n"] == 5 and got["source"] == "calibrate by root: 5 runs, 4 excluded"
    with calibration.Store(cfg) as store:  # the cron's refits read them no more
        assert sorted(s.key for s in store.samples("t4")) == [f"job:yolo:{j}" for j in (100, 102, 103, 104, 105)]
    bad = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--exclude-user", "no-such-user-here"])
    assert bad.exit_code == 1 and bad.output == "Error: --exclude-user 'no-such-user-here': no such user here\n"


def test_a_run_that_shared_its_node_is_flagged_and_weighs_less(
    cfg: config_mod.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    truth = truth_of(cfg)
    ws = workloads(4, seed=7)
    with calibration.Store(cfg) as store:
        for i, w in enumerate(ws):
            store.add_sample("t4", *job_sample(w, predict_seconds(w, truth, 1, 0.9, 8.86, 4), 300 + i, 0)[:1], "job", 0)
    monkeypatch.setattr(calibration, "shared_nodes", lambda *a: ({"job:yolo:301": [7, 8, 9, 10]}, ""))
    res = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--exclude-job", "303", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "  job 301; user root; shared its node with 4 job(s) (7, 8, 9, 10): weight 0.2" in res.stdout
    assert "  job 303; user root; left out: --exclude-job 303" in res.stdout


def test_node_lists_expand_and_overlapping_jobs_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    assert occupancy.expand("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07", "login1"]
    assert occupancy.expand("r[1-2]n[1-2]") == ["r1n1", "r1n2", "r2n1", "r2n2"]
    assert occupancy.expand("None assigned") == []
    answers = iter(
        [
            "41|g[1-2]|1000|2000\n42|g3|1000|2000\n",
            "41|g[1-2]|1000|2000\n43|g2|1500|2500\n44|g1|2000|2100\n45|g3|1200|1300\n42|g3|1000|2000\n"
            "46|None assigned|Unknown|Unknown\n",
        ]
    )
    calls = []

    class Result:
        def __init__(self, stdout: str) -> None:
            self.stdout = stdout

    def fake(argv: list[str], **kw: object) -> Result:
        calls.append(argv)
        return Result(next(answers))

    monkeypatch.setattr(occupancy, "run", fake)
    assert occupancy.shared([41, 42]) == {41: [43], 42: [45]}  # 44 started as 41 ended
    assert calls[1][calls[1].index("-N") + 1] == "g1,g2,g3"


def test_an_unjudged_fit_that_moves_predictions_far_is_not_saved_without_force(
    cfg: config_mod.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No new run to judge a fit by (a refit that only excludes): it is still refused when it moves a
    reference job's prediction more than x2, as leaving most runs out can."""
    truth = truth_of(cfg)
    ws = workloads(9, seed=7)
    honest = [job_sample(w, predict_seconds(w, truth, 1, 0.9, 8.86, 4), 300 + i, 0) for i, w in enumerate(ws[:3])]
    forged = [
        job_sample(w, predict_seconds(w, truth, 1, 0.9, 8.86, 4) * 30, 400 + i, NOBODY) for i, w in enumerate(ws[3:])
    ]
    with calibration.Store(cfg) as store:
        for s, uid in honest + forged:
            store.add_sample("t4", s, "job", uid)
    first = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--force", "--exclude-job", "999999"])
    assert first.exit_code == 0, first.output
    before = calibration.history(cfg, "t4")
    res = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--exclude-user", "nobody"])
    assert res.exit_code == 1, res.output
    last = res.output.strip().splitlines()[-1]
    assert last.startswith("Error: partition t4: with too few runs to judge it by, the new fit moves the reference")
    assert last.endswith("not saved (--force saves it)")
    assert calibration.history(cfg, "t4") == before
    forced = CliRunner().invoke(admin, ["calibrate", "-p", "t4", "--exclude-user", "nobody", "--force"])
    assert forced.exit_code == 0, forced.output
    assert (
        "(forced: too few runs to judge it, reference predictions moved up to x"
        in calibration.history(cfg, "t4")[-1].source
    )
