"""Reports from sacct rows, on output recorded from each supported release (no cluster needed)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from datetime import datetime
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from slurm_yolo.admin import report
from slurm_yolo.admin.report import output
from slurm_yolo.cli.admin import main as admin

REC = Path(__file__).parents[1] / "recorded"
# The delimiter the recordings were made with (``sacct -p --delimiter``; a live report draws its own).
DELIMITER = "<0f1e2d3c4b5a69788796a5b4c3d2e1f0>"
# Jobs alice named ``yo|lo`` and ``yo<newline>lo``; the first one's comment holds a forged ``|`` line.
ODD = {"22.05": (1825, 1826), "24.11": (448, 449)}


@pytest.mark.parametrize("release", sorted(ODD))
def test_recorded_rows_survive_any_text(release: str) -> None:
    rows = report.read_saved((REC / release / "sacct_report.txt").read_text(), DELIMITER)
    df = report.parse_jobs(rows, {"t4": 4})
    pipe, newline = ODD[release]
    assert 999 not in set(df["job_id"])  # the comment's forged line is the comment's
    odd = df[df["job_id"].isin(ODD[release])].set_index("job_id")
    assert list(odd.index) == [pipe, newline] and set(odd["User"]) == {"alice"} and set(odd["state"]) == {"COMPLETED"}
    assert odd.loc[pipe, "pred_s"] == 7 and odd.loc[newline, "pred_s"] == 3
    assert odd.loc[pipe, "gpus"] == 1 and odd.loc[newline, "gpus"] == 0.5  # two of a GPU's four shards
    assert odd.loc[pipe, "Comment"].endswith("\n999|vision|alice|t4|normal|COMPLETED|")
    assert (df["charge"] > 0).all() and (df["WorkDir"].str.startswith("/")).all()


def test_saved_with_pipes_a_record_holding_one_is_dropped_not_shifted() -> None:
    text = (REC / "22.05" / "sacct_report.txt").read_text().replace(DELIMITER, "|")
    df = report.parse_jobs(report.read_saved(text))
    assert 1826 in set(df["job_id"]) and 1820 in set(df["job_id"])
    assert set(df["Account"]) <= {"research", "vision"} and set(df["state"]) <= {"COMPLETED", "FAILED"}


def test_report_reads_a_saved_file_with_its_delimiter(tmp_path: Path) -> None:
    saved = tmp_path / "sacct.txt"
    saved.write_text((REC / "24.11" / "sacct_report.txt").read_text())
    res = CliRunner().invoke(
        admin, ["report", "--csv", "--view", "failures", "--sacct-file", str(saved), "--delimiter", DELIMITER]
    )
    assert res.exit_code == 0, res.output
    assert res.output == "# failures\nPartition,state,runs,jobs\nt4,COMPLETED,3,445 448 449\n"


def test_the_saved_file_help_names_the_fields() -> None:
    res = CliRunner().invoke(admin, ["report", "--help"], terminal_width=1000)
    assert f"-o {','.join(report.FIELDS)}`" in " ".join(res.output.split())


def _ledger_with_history(config_obj: object) -> None:
    from slurm_yolo.state import ledger

    with ledger.writer(config_obj) as lg:  # type: ignore[arg-type]
        lg.credit("vision", 99_994_000_000, "test")
        run = ledger.Run("c", 1, 1_764_460_800, 0, "vision", "u", "t4", "", Fraction(1), 600, 600, 1_000_000, 1_000_000)
        lg.hold(run, 600_000_000, None, "test")
        lg.settle(run.key, 400_000_000, "COMPLETED", 400, "test")
        lg.set_quota("vision", 2_000_000_000, 200_000_000_000, "test")  # last: no refill moves the numbers
        lg.credit("lab", 5_000_000, "test")


def _views(site_config: Path) -> dict:
    from slurm_yolo.core import config as config_mod

    cfg = config_mod.load()
    _ledger_with_history(cfg)
    rows = report.read_saved((REC / "24.11" / "sacct_report.txt").read_text(), DELIMITER)
    runs = report.jobs(cfg, report.Filters(), rows)
    views = report.build(cfg, report.Filters(), df=runs)
    return {"config": cfg, "runs": runs, "views": views}


def test_days_left_is_never_negative() -> None:
    import pandas as pd

    balance = pd.Series([100.0, -5.0, 0.0, 100.0, 100.0])
    net_burn = pd.Series([10.0, 10.0, 10.0, 0.0, -3.0])
    left = report.days_left(balance, net_burn)
    assert list(left[:3]) == [10.0, 0.0, 0.0] and left[3:].isna().all()  # overdrawn: spent; not burning: never


def test_a_bucket_above_its_capacity_burns_down_to_it_before_refills_count() -> None:
    """1,000 above a 600 cap burning 50 a day against a 20-a-day refill: 8 days to the cap at 50 a
    day (refills stop there), then 600 / 30 = 20 days: 28 in all; its net burn now is 50, not 30."""
    import pandas as pd

    s = pd.Series
    net, left = report.bucket_burn(
        s([1000.0, 500.0, 1000.0, 1000.0]),
        s([50.0, 50.0, 10.0, 50.0]),
        s([20.0, 20.0, 20.0, 0.0]),
        s([600.0, 600.0, 600.0, 0.0]),
    )
    assert list(net) == [50.0, 30.0, 10.0, 50.0]
    assert list(left[[0, 1, 3]]) == [28.0, 500 / 30, 20.0] and pd.isna(left[2])  # refills keep up with 10 a day


def test_tables_show_human_units_and_machine_formats_raw_numbers(site_config: Path) -> None:
    from slurm_yolo.admin.report import output

    views = _views(site_config)["views"]
    text = output.table(views)
    budgets = text.split("== budgets\n")[1].splitlines()
    vision = next(line for line in budgets if line.split()[0] == "vision").split()
    # the balance as `ledger balance` prints it (policy.fmt_tokens); tokens a day; days with one decimal
    assert " ".join(vision[1:3]) == "99.59 GTok" and "2.00 GTok/day" in " ".join(vision)
    lab = next(line for line in budgets if line.split()[0] == "lab")
    assert lab.endswith("∞") and "5.0 MTok" in lab
    assert "GPU-h" in text and "s/Mpx" not in text.split("== k")[0]
    assert not re.search(r"\d[eE][+-]?\d", text) and "99994000000" not in text and "-0." not in text
    page = output.html_page({"budgets": views["budgets"]})
    assert "99.59 GTok" in page and "99594000000" not in page
    csv = output.csv({"budgets": views["budgets"]})
    assert "vision,99594000000,0,400000000,2000000000,200000000000," in csv
    parsed = json.loads(output.as_json({"budgets": views["budgets"]}))["budgets"]
    assert {b["account"]: b["days_left"] for b in parsed}["lab"] is None


@pytest.mark.parametrize(
    ("value", "shown"),
    [(2.1e9, "2.10 GTok"), (5e5, "0.50 MTok"), (float("nan"), "")],
)
def test_token_columns_use_the_ledgers_formatter(value: float, shown: str) -> None:
    import pandas as pd

    from slurm_yolo.admin.report import output

    df = output.human("usage", pd.DataFrame({"tokens_charged": [value], "gpu_hours": [12.345]}))
    assert df["tokens_charged"][0] == shown and df["gpu_hours"][0] == "12.3 GPU-h"


def test_days_left_words() -> None:
    from slurm_yolo.admin.report import output

    assert [output.fmt_days(d) for d in (0.0, 4.04, float("nan"), 1e8)] == ["spent", "4.0 days", "∞", "> 10 years"]


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (45, "45 s"),
        (750, "12.5 min"),
        (3 * 3600, "3 h"),
        (5 * 86400, "5 days"),
        (4000 * 86400, "4,000 days"),
    ],
)
def test_durations(seconds: float, shown: str) -> None:
    from slurm_yolo.admin.report import output

    assert output.fmt_duration(seconds) == shown


def test_balance_history_walks_back_from_the_balance(site_config: Path) -> None:
    """The history ends at the ledger's balance and starts where the account started (the first
    credit is in the window): each movement kind moves the balance as the ledger does."""
    import time

    from slurm_yolo.core import config as config_mod

    cfg = config_mod.load()
    _ledger_with_history(cfg)
    now = time.time()
    h = report.balances(cfg, ["vision", "lab"], now - 3600, now)
    vision = list(h[h["account"] == "vision"]["balance"])
    # start, deposit, hold, charge (out of the hold), refund, then now
    assert vision == [0, 99_994_000_000, 99_394_000_000, 99_394_000_000, 99_594_000_000, 99_594_000_000]
    assert list(h[h["account"] == "lab"]["balance"]) == [0, 5_000_000, 5_000_000]


def test_refill_line_stops_at_the_capacity() -> None:
    import pandas as pd

    line = report.refill_line(10, 4, 20, pd.Series([0.0, 1.0, 2.0, 5.0]))
    assert list(line) == [10.0, 14.0, 18.0, 20.0]
    assert list(report.refill_line(30, 4, 20, pd.Series([0.0, 3.0]))) == [
        30.0,
        30.0,
    ]  # above it: refills add nothing


@pytest.mark.parametrize(
    ("since", "back"),
    [
        ("now", 0),
        ("now-7days", 7 * 86400),
        ("now-90", 90),
        ("now-2hours", 7200),
        ("now-1weeks", 604800),
        ("midnight", 3 * 86400),
    ],
)
def test_window_start_reads_sacct_times(since: str, back: float) -> None:
    assert report.window_start(since, 1_000_000.0, fallback_days=3) == 1_000_000.0 - back


def test_window_start_of_a_date_is_local_time() -> None:

    assert report.window_start("2026-11-01T10:00:00", 0.0) == datetime(2026, 11, 1, 10).timestamp()


def test_html_page_plots_usage_burn_down_and_predictions(site_config: Path) -> None:
    import base64

    from slurm_yolo.admin.report import output

    built = _views(site_config)
    series = report.series(built["config"], report.Filters(), built["runs"], built["views"])
    assert list(series["accuracy"]["elapsed"]) == [2, 2] and set(series["usage"]["Account"]) == {"vision", "research"}
    assert set(series["budgets"]["account"]) == {"vision", "lab"}
    page = output.html_page(built["views"], series)
    images = dict(re.findall(r'alt="(\w+)" src="data:image/png;base64,([^"]+)"', page))
    assert {"usage", "accuracy", "budgets"} <= set(images)
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images.values())


def test_plot_axes_are_in_human_units(site_config: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from slurm_yolo.admin.report import output

    built = _views(site_config)
    series = report.series(built["config"], report.Filters(), built["runs"], built["views"])
    fig = output.PLOTS["accuracy"](plt, built["views"]["accuracy"], series["accuracy"])
    fig.canvas.draw()
    ax = fig.axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("predicted run time", "actual run time")
    assert {t.get_text() for t in ax.get_yticklabels()} >= {"2 s", "5 s"}
    assert any(line.get_label() == "predicted = actual" for line in ax.get_lines())
    plt.close(fig)
    runs = pd.DataFrame(  # a run that hit its limit is a floor of its time: drawn apart, and said so
        {"job_id": [1, 2], "Partition": ["t4", "t4"], "state": ["COMPLETED", "TIMEOUT"], "pred_s": [60, 60]}
        | {"elapsed": [70, 120]}
    )
    fig = output.PLOTS["accuracy"](plt, built["views"]["accuracy"], runs)
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert "TIMEOUT (ran at least)" in labels and "t4" in labels and "timed-out" in fig.axes[0].get_title()
    plt.close(fig)
    fig = output.PLOTS["budgets"](plt, built["views"]["budgets"], series["budgets"])
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert any(label.endswith("GTok") for label in labels), labels
    assert any(line.get_label().startswith("refills alone (2.00 GTok/day)") for line in fig.axes[0].get_lines())
    balance = next(line for line in fig.axes[0].get_lines() if line.get_label() == "balance")
    assert balance.get_marker() == "o" and balance.get_drawstyle() == "steps-post"  # few movements: each shown
    plt.close(fig)


def test_matplotlib_stays_off_the_login_and_hook_paths() -> None:
    code = (
        "import sys, slurm_yolo.cli.yolo_sbatch, slurm_yolo.cli.admin, slurm_yolo.controller.hooks, slurm_yolo.controller.hookd, "
        "slurm_yolo.admin.report.output; print('matplotlib' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "False"


def test_a_young_accounts_burn_rate_is_over_its_own_life_not_a_week(site_config: Path) -> None:
    """An account that spent 400 MTok in its first hours burns at that pace, not at 400 MTok / 7 days
    (which promised ~12 times the days left); the rate rests on at least an hour."""
    import time

    from slurm_yolo.core import config as config_mod

    cfg = config_mod.load()
    _ledger_with_history(cfg)
    b = report.budgets(cfg, now=time.time() + 2 * 3600).set_index("account")
    assert b.loc["vision", "burn_days"] == pytest.approx(2 / 24, rel=0.01)
    assert b.loc["vision", "burn_per_day"] == pytest.approx(400_000_000 / (2 / 24), rel=0.01)
    b = report.budgets(cfg, now=time.time()).set_index("account")
    assert b.loc["vision", "burn_days"] == report.MIN_BURN_DAYS


def test_the_waits_plot_is_every_runs_median_not_a_median_of_qos_medians() -> None:
    import pandas as pd

    t = pd.Timestamp("2026-11-30T10:00:00")
    df = pd.DataFrame(
        {"Partition": ["t4"] * 4, "QOS": ["a", "a", "a", "b"], "submit": [t] * 4, "wait_s": [1.0, 1.0, 1.0, 100.0]}
    )
    assert report.waits(df)["median"].median() == 50.5  # what the plot used to draw
    over = report.waits_over_time(df)
    assert list(over["median"]) == [1.0] and list(over["jobs"]) == [4] and over["per"].iloc[0] == "hour"


def test_refills_alone_start_when_the_quota_began_paying() -> None:
    """A quota set mid-window draws no refills before it: the line starts where its first refill was
    earned from (its amount at the rate), or at its last refill when none was paid yet."""
    import pandas as pd

    moves = pd.DataFrame(
        {
            "account": ["a", "a", "b"],
            "at": [5000.0, 90_000.0, 7000.0],
            "kind": ["refill", "refill", "deposit"],
            "amount": [2000.0, 86_400.0, 5.0],
        }
    )
    quotas = {"a": (90_000.0, 86_400.0), "b": (3000.0, 10.0), "c": (10.0, 10.0)}  # (last refill, rate per day)
    assert report.refill_from(moves, quotas, 1000.0) == {"a": 3000.0, "b": 3000.0, "c": 1000.0}


def test_people_read_headers_and_the_window_programs_read_column_names(site_config: Path) -> None:
    from slurm_yolo.admin.report import output

    views = _views(site_config)["views"]
    text = output.table({"budgets": views["budgets"]}, "report: runs of --since now-7days")
    assert text.startswith("report: runs of --since now-7days\n== budgets\n")
    assert "days left" in text and "days_left" not in text and "burn measured over" in text
    page = output.html_page({"budgets": views["budgets"]}, heading="made 2026-12-02 09:00")
    assert "<p>made 2026-12-02 09:00</p>" in page and "<th>days left</th>" in page
    assert output.csv({"budgets": views["budgets"]}).startswith("# budgets\naccount,balance,held,charged,rate_per_day")


def test_usage_and_roi_show_money_at_each_partitions_cost_per_gpu_hour(site_config: Path) -> None:
    """The bundled config: t4 at 0.5 and a100 at 2.5 per GPU-hour (EUR); the money of a row is its
    GPU-hours times its partition's price, summed."""
    built = _views(site_config)
    runs, usage = built["runs"], built["views"]["usage"]
    per_hour = {"t4": 0.5, "a100": 2.5}
    for row in usage.itertuples():
        hours = runs[
            (runs["Account"] == row.Account) & (runs["User"] == row.User) & (runs["Partition"] == row.Partition)
        ]
        assert row.money == pytest.approx(hours["gpu_hours"].sum() * per_hour.get(str(row.Partition), 0.0))
    assert usage["money"].sum() > 0
    from slurm_yolo.admin.report import output

    text = output.table({"usage": usage})
    assert " cost " in text.splitlines()[1] and "GPU-hours" in text.splitlines()[1]
    assert " cost (EUR) " in output.table({"usage": usage}, currency="EUR").splitlines()[1]


def test_preemptions_per_tier_count_grace_ends_and_checkpoint_handovers() -> None:
    """Runs of three explore jobs and a prod one: job 1 handed its GPUs over at a checkpoint (REQUEUED,
    its launcher's record says preempted) and completed after; job 2 requeued at its time limit (not a
    preemption); job 3's grace ran out (PREEMPTED) and it has not come back. Each run's charge is
    its AdminComment's."""

    def row(job: int, qos: str, state: str, submit: str, elapsed: int, charge: int) -> list[str]:
        return [
            str(job),
            "vision",
            "alice",
            "a100",
            qos,
            state,
            submit,
            submit,
            submit,
            str(elapsed),
            "10",
            "cpu=1,gres/gpu=1",
            "yolo:eff=1",
            f"yolo:run={int(datetime.fromisoformat(submit).timestamp())},hold=9,charge={charge},refund=0",
            f"/w{job}",
        ]

    rows = [
        row(1, "yolo-explore", "REQUEUED", "2026-12-03T10:00:00", 100, 300),
        row(1, "yolo-explore", "COMPLETED", "2026-12-03T10:05:00", 200, 600),
        row(2, "yolo-explore", "REQUEUED", "2026-12-03T10:00:01", 40, 120),
        row(2, "yolo-explore", "COMPLETED", "2026-12-03T10:09:00", 40, 120),
        row(3, "yolo-explore", "PREEMPTED", "2026-12-03T10:00:02", 50, 150),
        row(4, "yolo-prod", "COMPLETED", "2026-12-03T10:01:00", 30, 90),
    ]
    why = {1: "preempted", 2: "time limit"}

    def records(workdir: str, job_id: int, user: str) -> list[dict[str, object]]:
        assert (workdir, user) == (f"/w{job_id}", "alice")
        return [{"kind": "requeue", "restart": 0, "why": why[job_id]}] if job_id in why else []

    got = report.preemptions(report.parse_jobs(rows), records)
    assert got.to_dict("records") == [
        {
            "Partition": "a100",
            "QOS": "yolo-explore",
            "runs": 5,
            "preempted": 2,
            "preempted_share": 0.4,
            "preempted_gpu_hours": pytest.approx(150 / 3600),
            "preempted_tokens_charged": 450.0,
            "resumed_completed": 1,
        }
    ]


def test_accuracy_judges_the_job_and_counts_a_requeue_for_time_as_a_miss() -> None:
    """Issue 38's loop: a job requeued for time looked like a fast completed run (its last run's time)
    with no timeout. Job 1 was requeued 170 s into its 3-minute limit (inside its USR2's 90 s lead),
    then ran 200 s: one job of 370 s that hit its limit. Job 3 was requeued 20 s in (a preemption):
    no miss. Job 2 ran once."""
    t = pd.Timestamp("2026-12-01T10:00:00")
    rows = [
        (1, t, "REQUEUED", 170, 180, 300),
        (1, t + pd.Timedelta(minutes=4), "COMPLETED", 200, 600, 300),
        (2, t, "COMPLETED", 100, 300, 100),
        (3, t, "REQUEUED", 20, 600, 100),
        (3, t + pd.Timedelta(minutes=1), "COMPLETED", 80, 600, 100),
    ]
    df = pd.DataFrame(rows, columns=["job_id", "submit", "state", "elapsed", "limit_s", "pred_s"])
    df["Partition"], df["yolo"], df["coverage"] = "t4", True, 0.99
    got = report.accuracy(df, lead=120).set_index("Partition").loc["t4"]
    assert (got["jobs"], got["completed"]) == (3, 3)
    assert got["timeout_share"] == pytest.approx(1 / 3) and got["realised_coverage"] == pytest.approx(2 / 3)
    assert got["median_error"] == 0 and got["p90_abs_error"] == pytest.approx(0.8 * 70 / 300)  # job 1: 370 s of 300


@pytest.mark.parametrize(
    ("k", "shown"),
    [
        (0.7507443, "0.7507 s/Mpx"),
        (9.531e-05, "0.00009531 s/Mpx"),
        (123.456, "123.5 s/Mpx"),
        (12345.6, "12346 s/Mpx"),
    ],
)
def test_k_is_shown_without_scientific_notation(k: float, shown: str) -> None:
    """A README follower's calibrate on forged runs left t4's history at k 9.5e-05, which the k view
    printed as '9.531e-05 s/Mpx' (the report's own test forbids that notation)."""
    assert output.UNITS["k"]["k"](k) == shown


def test_an_empty_view_says_why() -> None:
    """An empty table alone reads as a fault: each view says what would fill it."""
    import pandas as pd

    from slurm_yolo.admin.report import VIEWS, output

    text = output.table({name: pd.DataFrame() for name in VIEWS})
    for name in VIEWS:
        assert f"== {name}\n(no data: {output.EMPTY[name]})" in text
    assert "no GPU job in the window has GPU figures" in output.EMPTY["efficiency"]


def test_each_run_of_a_requeued_job_takes_its_own_admin_comment_entry() -> None:
    """A requeued job's AdminComment lists every run by submit time; sacct prints it on each run's
    row. Each run is billed its own entry, not the first one."""
    first, second = "2026-12-05T00:08:43", "2026-12-05T00:08:52"
    run1, run2 = (int(datetime.fromisoformat(s).timestamp()) for s in (first, second))
    both = f"yolo:run={run1},hold=180000,charge=10500,refund=169500;run={run2},hold=180000,charge=28500,refund=151500"

    def row(submit: str, state: str, elapsed: int, admin: str) -> list[str]:
        head = ["7", "vision", "alice", "a100", "normal", state, submit, submit, submit, str(elapsed), "2"]
        return [*head, "cpu=1,gres/gpu=1", "yolo:eff=1", admin, "/w"]

    df = report.parse_jobs([row(first, "REQUEUED", 7, both.split(";")[0]), row(second, "COMPLETED", 19, both)])
    assert list(df["charge"]) == [10500, 28500] and list(df["refund"]) == [169500, 151500]
    stale = report.parse_jobs([row(second, "COMPLETED", 19, both.split(";")[0])])  # its entry not written yet
    assert stale["charge"].isna().all()


def test_a_report_of_some_jobs_shows_their_budgets_and_the_k_entries_they_concern(site_config: Path) -> None:
    """`report -j`: the budgets those jobs drew on and, of k's history, the model each job planned
    with and what its own feedback moved, not every account's and every partition's whole history
    (sacct -j gives only their runs; job 448 was submitted 2026-11-30 16:41:45 local time)."""
    from slurm_yolo.core import config as config_mod
    from slurm_yolo.state import calibration

    cfg = config_mod.load()
    _ledger_with_history(cfg)
    with calibration.Store(cfg) as store:
        for partition in ("t4", "a100"):
            store.save(partition, replace(calibration.load(cfg, partition).model, k=2.0), "test")
        for k, source, when in (
            (1.5, "calibrate", datetime(2026, 11, 29, 12, 0)),  # an older model: not the one 448 planned with
            (1.7, "recalibrate", datetime(2026, 11, 30, 3, 17)),  # the one it planned with
            (1.8, "job 448", datetime(2026, 11, 30, 16, 41, 50)),  # its own feedback
            (1.9, "job 449", datetime(2026, 11, 30, 16, 41, 51)),  # another job's
        ):
            model = json.loads(store.conn.execute("SELECT model FROM params WHERE partition = 't4'").fetchone()[0])
            store.conn.execute(
                "INSERT INTO history (partition, at, model, source) VALUES ('t4', ?, ?, ?)",
                (when.astimezone().isoformat(), json.dumps({**model, "k": k}), source),
            )
        store.conn.commit()
    rows = report.read_saved((REC / "24.11" / "sacct_report.txt").read_text(), DELIMITER)
    runs = report.jobs(cfg, report.Filters(), rows)
    mine = runs[runs["job_id"] == 448]  # what `sacct -j 448` gives
    assert set(mine["Account"]) == {"vision"} and set(mine["Partition"]) == {"t4"}
    views = report.build(cfg, report.Filters(jobs=(448,)), views=("budgets", "k"), df=mine)
    assert set(views["budgets"]["account"]) == {"vision"}
    assert list(views["k"]["source"]) == ["recalibrate", "job 448"] and list(views["k"]["k"]) == [1.7, 1.8]
    every = report.build(cfg, report.Filters(), views=("budgets", "k"), df=runs)
    assert set(every["budgets"]["account"]) == {"vision", "lab"} and set(every["k"]["partition"]) == {"t4", "a100"}
