"""yolo-sbatch and slurm-yolo as users call them (offline parts; the cluster tests submit for real)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import durations, synthetic
from slurm_yolo.login import plan
from slurm_yolo.state import cost

REQUIRED = {
    "pixels",
    "work_pixels",
    "predicted_seconds",
    "time_limit_seconds",
    "partition",
    "gres",
    "gpus",
    "qos",
    "k",
    "script",
    "predicted_train_seconds",
}


def run(args: list[str]) -> tuple[int, str]:
    res = CliRunner().invoke(yolo_sbatch, args)
    if res.exception and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def test_dry_run_json_offline_for_any_partition(dataset: Path) -> None:
    code, out = run(
        [
            "--dry-run",
            "--json",
            "--partition",
            "never-configured",
            "train",
            f"data={dataset}",
            "model=yolov8n.yaml",
            "epochs=3",
            "imgsz=96",
            "batch=8",
        ]
    )
    assert code == 0, out
    d = json.loads(out)
    assert set(d) >= REQUIRED
    assert d["partition"] == "never-configured" and d["gres"] == "gpu:1" and d["gpus"] == 1
    val_weight = json.loads(Path("slurm_yolo/data/priors.json").read_text())["terms"][
        "val_weight"
    ]  # the shipped prior's
    assert d["pixels"] == pytest.approx(3 * 16 * 96**2 + val_weight * 4 * 8 * 96**2)
    assert d["time_limit_seconds"] % 60 == 0 and d["time_limit_seconds"] >= d["predicted_seconds"]
    assert d["predicted_train_seconds"] < d["predicted_seconds"]
    assert d["job_id"] is None


def test_explain_says_everything(dataset: Path, site_config: Path) -> None:
    code, out = run(
        ["--dry-run", "--explain", "-p", "a100", "train", f"data={dataset}", "model=yolo11n.yaml", "epochs=2"]
    )
    assert code == 0, out
    for word in (
        "images: 16 train",
        "640-equivalent",
        "family yolo11",
        "k 1 s/Mpx",
        "shipped priors (the corpus' shape and costs, the config's k and start-up)",
        "start-up 20.0 s",
        "buffer:",
        "gres:",
        "qos:",
    ):
        assert word in out
    code, plain = run(["--dry-run", "-p", "a100", "train", f"data={dataset}", "model=yolo11n.yaml", "epochs=2"])
    assert (
        code == 0
        and plain.startswith("Not submitted (--dry-run) (a100, shard:a100:2, qos ")
        and "k 1 s/Mpx" not in plain
    )
    assert plain.splitlines()[1].startswith("#!") and out.endswith(plain)  # --explain adds the breakdown before


def test_the_login_side_never_imports_the_controllers_or_the_jobs() -> None:
    """yolo-sbatch, planning a job, asking Slurm and following it (``--wait``), loads the layers it
    shares and its own role's code, nothing of the controller's, the job's or the admin's, and not the
    MariaDB driver: a login node runs none of that code (pyproject.toml's contracts say it statically)."""
    import subprocess
    import sys

    code = (
        "import sys, slurm_yolo.cli.yolo_sbatch, slurm_yolo.cli.follow; from slurm_yolo.login import submission; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2][-1] in ('controller', 'job', 'admin')"
        " and m.startswith('slurm_yolo.')), 'pymysql' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] False"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["train", "data={ds}", "epoch=3"], "Error: unknown key 'epoch' (did you mean 'epochs'?)"),
        (["train", "data=/nowhere/d.yaml"], "Error: data yaml /nowhere/d.yaml not found"),
        (["train", "data={ds}", "model=mystery.pt"], "Error: model mystery.pt not found"),
        (["--deadline", "soon", "train", "data={ds}"], "Error: duration 'soon' not understood"),
        (["--gpus", "0", "train", "data={ds}"], "Error: --gpus 0: at least 1"),
        (["train", "data={ds}", "device=cpu"], "Error: device=cpu"),
        (["--job-name", "a\nb", "train", "data={ds}"], "Error: --job-name: the value contains a control character"),
    ],
)
def test_bad_input_one_line_nonzero(dataset: Path, args: list[str], message: str) -> None:
    code, out = run(["--dry-run", "-p", "a100", *[a.format(ds=dataset) for a in args]])
    assert code != 0
    assert out.strip() == message or out.strip().startswith(message), out
    assert len(out.strip().splitlines()) == 1


def write_script(path: Path, body: str) -> None:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


# A stand-in scontrol: ``show partition`` as Slurm prints it with --all --oneliner (t4 the default).
PARTITIONS = (
    "PartitionName=a100 AllowGroups=ALL AllowAccounts=ALL Default=NO QoS=N/A Nodes=gpu-a100-1 State=UP\n"
    "PartitionName=t4 AllowGroups=ALL AllowAccounts=ALL Default=YES QoS=N/A Nodes=gpu-t4-1 State=UP\n"
)


def fake_slurm(home: Path, tmp_path: Path, scontrol: str, config: str = "") -> Path:
    """Stand-in Slurm commands in the test's config: ``scontrol`` as given; ``sbatch`` logs its
    arguments and SLURM_TIME_FORMAT to ``argv.log``, keeps each script as PARTITION.sbatch, answers
    ``--test-only`` from ``answer.PARTITION`` (an epoch start, or a refusal) and a submission with 42."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    write_script(bin_dir / "scontrol", scontrol)
    write_script(
        bin_dir / "sbatch",
        f"""script=$(cat)
echo "$SLURM_TIME_FORMAT $*" >> {tmp_path}/argv.log
part=$(printf '%s\\n' "$script" | sed -n 's/^#SBATCH --partition=//p')
printf '%s\\n' "$script" > {tmp_path}/$part.sbatch
case "$*" in *--parsable*) echo 42; exit 0 ;; esac
answer=$(cat {tmp_path}/answer.$part)
case "$answer" in
  [0-9]*) echo "sbatch: Job 77 to start at $answer using 1 processors on nodes n1 in partition $part" >&2 ;;
  *) echo "sbatch: error: $answer" >&2; exit 1 ;;
esac""",
    )
    slurm = f'[slurm]\nbin_dir = "{bin_dir}"\n'
    (home / "config.toml").write_text(config.replace("[slurm]\n", slurm) if "[slurm]\n" in config else config + slurm)
    return bin_dir


def test_no_partition_and_none_configured_is_slurms_default(home: Path, tmp_path: Path, dataset: Path) -> None:
    fake_slurm(home, tmp_path, f"echo \"$*\" > {tmp_path}/scontrol.log; printf '{PARTITIONS}'")
    code, out = run(["--dry-run", "--json", "train", f"data={dataset}", "model=yolov8n.yaml"])
    assert code == 0, out
    d = json.loads(out)
    assert d["partition"] == "t4" and "#SBATCH --partition=t4\n" in d["script"] and d["expected_start"] is None
    assert (tmp_path / "scontrol.log").read_text() == "--all --oneliner show partition\n"
    assert not (tmp_path / "argv.log").exists()  # planned offline once Slurm named it


@pytest.mark.parametrize(
    ("scontrol", "why"),
    [
        (f"printf '{PARTITIONS.replace('YES', 'NO')}'", "Slurm has no default partition (none is Default=YES)"),
        (
            "echo 'slurm_load_partitions: Unable to contact slurm controller (connect failure)' >&2; exit 1",
            "scontrol failed: slurm_load_partitions: Unable to contact slurm controller (connect failure)",
        ),
    ],
)
def test_no_default_partition_is_one_error(home: Path, tmp_path: Path, dataset: Path, scontrol: str, why: str) -> None:
    fake_slurm(home, tmp_path, scontrol)
    code, out = run(["--dry-run", "train", f"data={dataset}"])
    assert code == 1
    assert out == f"Error: no --partition given, none configured, and no default partition from Slurm: {why}\n"


def test_auto_asks_slurm_with_the_real_request(home: Path, tmp_path: Path, dataset: Path, site_config: Path) -> None:
    """``--partition auto`` asks ``sbatch --test-only`` with each partition's own job script (on stdin,
    as its submission would send it) and takes the earliest start + predicted run time."""
    fake_slurm(home, tmp_path, "exit 1", site_config.read_text())
    now = int(time.time())
    (tmp_path / "answer.a100").write_text(str(now + 3600))
    (tmp_path / "answer.t4").write_text(str(now + 60))
    args = ["--json", "--explain", "-A", "vision", "train", f"data={dataset}", "model=yolov8l.yaml", "epochs=2"]
    code, out = run(["--dry-run", *args])
    assert code == 0, out
    d = json.loads(out)
    assert d["partition"] == "t4" and d["expected_start"] == now + 60
    assert (tmp_path / "argv.log").read_text() == "%s --test-only --comment=slurm-yolo:trial\n" * 2
    assert (tmp_path / "t4.sbatch").read_text() == d["script"]  # the very script it would submit
    a100 = (tmp_path / "a100.sbatch").read_text()
    for line in (
        "#SBATCH --partition=a100",
        "#SBATCH --gres=gpu:a100:1",
        "#SBATCH --qos=",
        "#SBATCH --time=",
        "#SBATCH --account=vision",
    ):
        assert line in a100
    assert f"partition auto: a100 would start {plan.clock(now + 3600)} + " in "\n".join(d["explain"])
    assert d["explain"][-2] == "partition auto: t4 finishes first"
    assert d["explain"][-1] in (
        f"expected start: {plan.clock(now + 60)} on t4, in {when} (Slurm's scheduler)" for when in ("1.0 min", "59 s")
    )  # a second may have passed

    code, out = run(args[2:])  # submitted: the start beside the prediction
    assert code == 0, out
    assert out.startswith("Submitted batch job 42 (t4, gpu:t4:1, qos ")
    assert out.endswith(f" EUR, expected start {plan.clock(now + 60)})\n") and ", predicted " in out


def test_auto_skips_what_slurm_refuses(home: Path, tmp_path: Path, dataset: Path, site_config: Path) -> None:
    fake_slurm(home, tmp_path, "exit 1", site_config.read_text())
    now = int(time.time())
    (tmp_path / "answer.a100").write_text(str(now + 600))
    (tmp_path / "answer.t4").write_text("Batch job submission failed: Requested node configuration is not available")
    code, out = run(["--dry-run", "--json", "-p", "auto", "train", f"data={dataset}", "model=yolov8l.yaml"])
    assert code == 0, out
    d = json.loads(out)
    assert d["partition"] == "a100" and d["expected_start"] == now + 600
    assert (
        "partition auto: t4 refused by Slurm: sbatch failed: sbatch: error: Batch job submission failed: "
        "Requested node configuration is not available"
    ) in d["explain"]

    (tmp_path / "answer.a100").write_text("Invalid account or account/partition combination specified")
    code, out = run(["--dry-run", "-p", "auto", "train", f"data={dataset}", "model=yolov8l.yaml"])
    assert code == 1
    assert out == (
        "Error: --partition auto: Slurm refuses the job on every partition (a100: sbatch failed: sbatch: "
        "error: Invalid account or account/partition combination specified; t4: sbatch failed: sbatch: "
        "error: Batch job submission failed: Requested node configuration is not available)\n"
    )


def test_every_command_has_help() -> None:
    for cli, name in ((yolo_sbatch, "yolo-sbatch"), (admin, "slurm-yolo")):
        res = CliRunner().invoke(cli, ["--help"])
        assert res.exit_code == 0 and "Usage:" in res.output, name
    for sub in admin.commands.values():
        assert sub.help, f"slurm-yolo {sub.name} has no help text"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["report", "--view", "nosuch"], "Invalid value for '--view'"),
        (["ledger", "history"], "Missing argument 'ACCOUNT'"),
        (["watch", "abc"], "Invalid value for 'JOB_ID'"),
        (["nosuch"], "No such command 'nosuch'"),
        (["ledger", "quota", "set", "--nosuch"], "No such option '--nosuch'"),
    ],
)
def test_admin_usage_errors_are_one_line(argv: list[str], message: str) -> None:
    res = CliRunner().invoke(admin, argv)
    assert res.exit_code == 2 and res.output.count("\n") == 1, res.output
    assert res.output.startswith("Error: ") and message in res.output


def test_login_path_imports_no_heavy_modules() -> None:
    import subprocess
    import sys

    code = "import sys, slurm_yolo.cli.yolo_sbatch, slurm_yolo.cli.admin; print(sorted(m for m in ('torch','ultralytics','pandas','numpy','sqlite_utils') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["train", "data={ds}", "device=0,1,2,3,4,5,6,7,8"],
            "Error: device= names 9 GPUs: partition a100 has 2 GPUs per node",
        ),
        (
            ["train", "data={ds}", "device=$(id)"],
            "Error: 'device=$(id)' must name GPU indices such as 0 or 0,1",
        ),
        (["train", "data={ds}", "fraction=nan"], "Error: 'fraction=nan' must be in (0, 1]"),
        (["train", "data={ds}", "batch=1e300"], "Error: 'batch=1e+300' is absurd"),
        (
            ["--deadline", "1s", "train", "data={ds}"],
            "Error: --deadline 1 s is shorter than the job's start-up alone on a100 (20 s)",
        ),
        (
            ["--deadline", "45s", "train", "data={ds}", "model=yolov8x.yaml", "epochs=50"],
            "Error: --deadline 45 s cannot be met on a100: needs ",
        ),
        (
            ["-J", "a/b", "train", "data={ds}"],
            "Error: --job-name 'a/b' holds a '/', so --output %x-%j.out points into folder a, which does not exist",
        ),
        (
            ["-J", "a/b", "-e", "err/%x.err", "-o", "out.log", "train", "data={ds}"],
            "Error: --job-name 'a/b' holds a '/', so --error err/%x.err points into folder err/a, which does not exist",
        ),
        (
            ["-o", "/nowhere/%j.out", "train", "data={ds}"],
            "Error: --output /nowhere/%j.out: folder /nowhere does not exist",
        ),
        (
            ["--prefer", "cheapest", "train", "data={ds}"],
            "Error: --prefer cheapest chooses among partitions: give --partition auto, not a100",
        ),
        (
            ["--sbatch-arg=--chdir={tmp}", "-o", "logs/%j.out", "train", "data={ds}"],
            "Error: --output logs/%j.out: folder logs does not exist",
        ),
    ],
)
def test_checked_against_the_partition_before_submitting(
    dataset: Path, site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    """Each of these would have been submitted and then pended for ever, or failed at once with no log."""
    monkeypatch.chdir(tmp_path)
    code, out = run(["--dry-run", "-p", "a100", *[a.format(ds=dataset, tmp=tmp_path) for a in args]])
    assert code != 0 and out.startswith(message) and len(out.strip().splitlines()) == 1, out


def test_log_paths_that_slurm_can_open_plan(
    dataset: Path, site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "logs").mkdir()
    for args in (
        ["-J", "a/b"],
        ["-o", "logs/%x-%j.out"],
        ["-o", "logs/%j/x.out"],
        ["-o", "x\\%x/y.out"],
        ["--sbatch-arg=--chdir=" + str(tmp_path / "logs"), "-o", "x.out"],
        ["-J", "plain", "-e", "%x.err"],
    ):
        code, out = run(["--dry-run", "--json", "-p", "a100", *args, "train", f"data={dataset}"])
        assert code == 0, (args, out)


def test_auto_passes_over_partitions_too_small(
    dataset: Path, site_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from slurm_yolo.slurm import commands, parsers

    site_config.write_text(
        site_config.read_text() + '\n[partitions.big]\ngpu_type = "h100"\ngpu_like = "cpu"\ngpus_per_node = 4\n'
    )
    monkeypatch.setattr(
        commands,
        "will_run",  # Slurm would start any of them now
        lambda scripts, bin_dir=None, timeout=30.0: [parsers.WillRun(int(time.time())) for _ in scripts],
    )
    code, out = run(
        ["--dry-run", "--json", "-p", "auto", "train", f"data={dataset}", "model=yolov8n.yaml", "device=0,1,2"]
    )
    assert code == 0, out
    assert (json.loads(out)["partition"], json.loads(out)["gres"]) == ("big", "gpu:h100:3")
    code, out = run(["--dry-run", "--json", "-p", "auto", "train", f"data={dataset}", "device=0,1,2,3,4"])
    assert code != 0 and out.startswith("Error: device= names 5 GPUs: partition a100 has 2 GPUs per node"), out


def test_bundled_dataset_plans_offline_and_says_where_its_counts_came_from(
    site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "cfg"))
    code, out = run(["--dry-run", "--explain", "-p", "a100", "train", "model=yolov8n.yaml", "data=coco8.yaml"])
    assert code == 0, out
    assert out.splitlines()[0].startswith(
        "data: coco8.yaml: 4 train, 4 val images, ultralytics 8.4.190's published sizes"
    )
    assert "images: 4 train x 100 epochs" in out
    res = CliRunner().invoke(
        yolo_sbatch, ["--dry-run", "--json", "-p", "a100", "train", "model=yolov8n.yaml", "data=coco.yaml"]
    )
    d = json.loads(res.stdout)
    assert "`slurm-yolo stage coco.yaml`" in res.stderr  # not downloaded: the offline nodes would need it staged
    assert (d["dataset"]["train"], d["dataset"]["val"], d["workload"]["train_images"]) == (118287, 5000, 118287)
    assert d["explain"][0].startswith("data: coco.yaml: 118287 train, 5000 val images")


def test_quota_and_refill_say_what_they_did(home: Path) -> None:
    """`quota set` echoes the bucket in `balance`'s words and units; a refill that blocked, lifted and
    expired nothing says so rather than printing nothing."""
    (home / "config.toml").write_text("[ledger]\nenforce = false\n")
    res = CliRunner().invoke(admin, ["ledger", "quota", "set", "acct", "--rate", "86400M", "--burst", "1G"])
    assert (res.exit_code, res.output) == (0, "acct: quota 86.40 GTok/day up to 1.00 GTok\n")
    res = CliRunner().invoke(admin, ["ledger", "balance", "acct"])
    assert res.output.endswith(", quota 86.40 GTok/day up to 1.00 GTok\n")
    res = CliRunner().invoke(admin, ["ledger", "refill"])
    assert (res.exit_code, res.output) == (0, "buckets refilled: no tokens expired, no account blocked or unblocked\n")


def test_a_zero_quota_and_the_tiers_not_set_say_what_they_mean(home: Path) -> None:
    """A bucket that refills nothing is "no quota", not "0 Tok/day up to 0 Tok"; the tier listing
    says what every QOS without a tier pays."""
    (home / "config.toml").write_text("[ledger]\nenforce = false\n")
    res = CliRunner().invoke(admin, ["ledger", "quota", "set", "acct", "--rate", "0", "--burst", "0"])
    assert (res.exit_code, res.output) == (0, "acct: no quota (only deposits add tokens)\n")
    assert (
        CliRunner()
        .invoke(admin, ["ledger", "balance", "acct"])
        .output.endswith(", no quota (only deposits add tokens)\n")
    )
    res = CliRunner().invoke(admin, ["ledger", "tiers"])
    assert (res.exit_code, res.output) == (0, "every QOS (no tiers set): 1 (the partition's price)\n")


def test_short_times_and_amounts_are_not_shown_as_zero() -> None:
    assert (durations.fmt_minutes(25.4), durations.fmt_minutes(59.6), durations.fmt_minutes(90)) == (
        "25 s",
        "1.0 min",
        "1.5 min",
    )
    assert (cost.fmt_amount(0.0042), cost.fmt_amount(0), cost.fmt_amount(1234.5)) == ("0.0042", "0.00", "1,234.50")


@pytest.mark.cluster  # `price set` checks the partition with the bundled cluster's sinfo
def test_price_show_names_who_set_a_price_and_why(home: Path) -> None:
    (home / "config.toml").write_text("[ledger]\nenforce = false\n")
    CliRunner().invoke(admin, ["ledger", "price", "set", "t4", "1000"])
    CliRunner().invoke(admin, ["ledger", "price", "set", "a100", "3k", "--reason", "contract 2027"])
    lines = CliRunner().invoke(admin, ["ledger", "price", "show"]).output.splitlines()
    assert lines[1].startswith("a100: 3,000 tokens per GPU-second since ") and lines[1].endswith(": contract 2027)")
    assert lines[2].startswith("t4: 1,000 tokens per GPU-second since ") and lines[2].endswith(", no reason given)")
    assert "()" not in lines[2] and ": )" not in lines[2]


def test_price_show_lists_what_is_off_the_books(home: Path) -> None:
    """Users read `price show` for what a job costs: the exempt partitions and accounts are there."""
    (home / "config.toml").write_text("[ledger]\nexempt_partitions = ['debug']\nexempt_accounts = ['staff']\n")
    lines = CliRunner().invoke(admin, ["ledger", "price", "show"]).output.splitlines()
    assert lines[1:] == [
        "partition debug: exempt, GPU jobs on it hold and pay nothing (ledger.exempt_partitions)",
        "account staff: exempt, GPU jobs of it hold and pay nothing (ledger.exempt_accounts)",
    ]
    shown = json.loads(CliRunner().invoke(admin, ["ledger", "price", "show", "--json"]).output)
    assert shown["exempt"] == {"partitions": ["debug"], "accounts": ["staff"]}


def test_every_commands_short_help_is_a_whole_phrase_in_plain_text() -> None:
    """The command lists cut each help at its first full stop: never at an "e.g." (``deposit`` once
    showed "Add AMOUNT tokens (e.g."); and no help shows reStructuredText's double backticks."""

    def walk(cmd: click.Command, path: str) -> Iterator[tuple[str, click.Command]]:
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, f"{path} {name}")

    for root, name in ((yolo_sbatch, "yolo-sbatch"), (admin, "slurm-yolo")):
        for path, cmd in walk(root, name):
            short = cmd.get_short_help_str(limit=300)
            assert short.count("(") == short.count(")") and not short.endswith("e.g."), (path, short)
            helps = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
            assert not [h for h in helps if "``" in h], path


def test_a_partition_not_configured_is_planned_with_a_warning(dataset: Path, site_config: Path) -> None:
    """``-p v100`` where the config knows a100 and t4: a typo plans with the defaults, so it says so
    (stderr, and in --explain); ``--json`` stays one JSON object on stdout."""
    res = CliRunner().invoke(
        yolo_sbatch, ["--dry-run", "--json", "-p", "v100", "train", f"data={dataset}", "model=yolov8n.yaml"]
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["partition"] == "v100"
    assert res.stderr == (
        "warning: partition v100 is not one of the configured (a100, t4): planned with the defaults"
        " (whole GPUs, the prior k); Slurm refuses it if it does not exist\n"
    )
    assert res.stderr.removeprefix("warning: ").strip() in json.loads(res.stdout)["explain"]
    words = ["--dry-run", "--json", "-p", "t4", "train", f"data={dataset}", "model=yolov8n.yaml"]
    assert CliRunner().invoke(yolo_sbatch, words).stderr == ""


def test_weights_that_are_not_on_disk_are_named_before_the_job_fails_on_them(
    dataset: Path, site_config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The job runs ultralytics offline: ``model=yolov8n.pt`` that is not there would fail seconds
    into the job, so a dry run names the folder it is not in and the command that stages it (a
    submission is refused: tests/login/test_stage.py); on a site whose nodes have the network, not a
    word (the job downloads them). Weights on disk, and a yaml, plan without a word."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(
        yolo_sbatch, ["--dry-run", "--json", "-p", "t4", "train", f"data={dataset}", "model=yolov8n.pt"]
    )
    assert res.exit_code == 0 and json.loads(res.stdout)["partition"] == "t4"
    assert res.stderr.startswith("warning: yolov8n.pt is not in ") and res.stderr.endswith(
        ", and the compute nodes have no network to download it: stage it first with `slurm-yolo stage yolov8n.pt`"
        " (on a login node) (a submission is refused until then)\n"
    )
    words = ["--dry-run", "--explain", "-p", "t4", "train", f"data={dataset}", "model=yolov8n.pt"]
    explained = CliRunner().invoke(yolo_sbatch, words)  # among --explain's lines, and once (a follower saw it twice)
    assert explained.exit_code == 0 and explained.output.count("yolov8n.pt is not in") == 1, explained.output
    site_config.write_text(site_config.read_text() + "\n[stage]\nnodes_online = true\n")
    online = CliRunner().invoke(yolo_sbatch, ["--dry-run", "-p", "t4", "train", f"data={dataset}", "model=yolov8n.pt"])
    assert online.exit_code == 0 and online.stderr == ""
    (tmp_path / "yolov8n.pt").write_bytes(b"weights")
    for model in ("yolov8n.pt", "yolov8n.yaml"):
        res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "-p", "t4", "train", f"data={dataset}", f"model={model}"])
        assert res.exit_code == 0 and res.stderr == "", res.stderr


def test_a_config_that_is_not_there_is_said_not_silently_replaced_by_defaults(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Forgetting ``SLURM_YOLO_CONFIG`` (or mistyping it) planned another job than the site's (whole
    GPUs, the prior k) without a word; ``balance`` said only ``no ledger yet``. A ``SLURM_YOLO_HOME``
    without a config.toml is a deliberate trial of the defaults and stays quiet."""
    words = ["--dry-run", "-p", "t4", "train", f"data={dataset}", "model=yolov8n.yaml"]
    assert CliRunner().invoke(yolo_sbatch, words).stderr == ""  # the test's own SLURM_YOLO_HOME
    monkeypatch.setenv("SLURM_YOLO_CONFIG", str(tmp_path / "typo.toml"))
    res = CliRunner().invoke(yolo_sbatch, words)
    hint = (
        f"no slurm-yolo config at {tmp_path / 'typo.toml'} (from SLURM_YOLO_CONFIG): the built-in defaults are in"
        " force; export SLURM_YOLO_CONFIG=<your site's config.toml>"
    )
    assert res.exit_code == 0 and res.stderr == f"warning: {hint}\n"
    res = CliRunner().invoke(yolo_sbatch, words[1:])  # a submission on the defaults could hold 1000x the site's
    assert (res.exit_code, res.stdout) == (1, "")
    assert res.stderr == f"Error: job not submitted: {hint} (--dry-run plans on the defaults)\n"
    monkeypatch.setenv("SLURM_YOLO_HOME", str(tmp_path / "state"))
    res = CliRunner().invoke(admin, ["ledger", "balance"])
    assert (
        res.exit_code == 1
        and res.stderr == f"Error: no ledger yet at {tmp_path / 'state' / 'private' / 'ledger.db'} ({hint})\n"
    )


@pytest.mark.parametrize(
    ("task", "model", "gflops"),
    [("segment", "yolov8n-seg.yaml", 12.14), ("pose", "yolo11n-pose.yaml", 7.78), ("obb", "yolo26s-obb.pt", 25.05)],
)
def test_segment_pose_and_obb_models_plan_from_the_table(
    dataset: Path, tmp_path: Path, task: str, model: str, gflops: float
) -> None:
    data = dataset
    if task == "pose":  # a pose model trains on a pose dataset only (a yaml with kpt_shape), beside the images
        data = dataset.with_name("pose.yaml")
        data.write_text(dataset.read_text() + "kpt_shape: [17, 3]\n")
    else:  # segment and OBB: the detect dataset's boxes are refused in one line; their 4 corners plan
        words = ["--dry-run", "-p", "t4", task, "train", f"data={data}", f"model={model}"]
        res = CliRunner().invoke(yolo_sbatch, words)
        assert res.exit_code == 1 and res.stdout == "" and res.stderr.count("\n") == 1
        assert (
            res.stderr.startswith(f"Error: {model} is a {task} model: its labels need") and "boxes alone" in res.stderr
        )
        data = synthetic.make_dataset(tmp_path / "corners", train=16, val=8, size=96)
        for label in (tmp_path / "corners" / "labels").rglob("*.txt"):
            rows = [[float(v) for v in line.split()] for line in label.read_text().splitlines() if line.strip()]
            label.write_text(
                "".join(
                    f"{c:.0f} {x - w / 2} {y - h / 2} {x + w / 2} {y - h / 2} {x + w / 2} {y + h / 2} {x - w / 2}"
                    f" {y + h / 2}\n"
                    for c, x, y, w, h in rows
                )
            )
    res = CliRunner().invoke(
        yolo_sbatch, ["--dry-run", "--json", "-p", "t4", task, "train", f"data={data}", f"model={model}"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["workload"]["gflops"] == gflops


def test_a_refused_plans_explain_shows_its_numbers(dataset: Path) -> None:
    """A refusal with --explain prints what was worked out before it (the data, the work, the time
    model, the prediction and the limit), then its one Error: line; without --explain, the line alone."""
    words = ["--dry-run", "-p", "a100", "train", f"data={dataset}", "model=yolov8x.yaml", "epochs=100000", "imgsz=2560"]
    code, out = run(["--explain", *words])
    lines = out.strip().splitlines()
    assert (
        code == 1
        and lines[-1].startswith("Error: the job would need a time limit of ")
        and "more than a year" in lines[-1]
    )
    for start in ("data: ", "images: 16 train x 100000 epochs", "model: yolov8x", "time model: ", "time: ", "buffer: "):
        assert any(line.startswith(start) for line in lines[:-1]), (start, lines)
    code, out = run(words)
    assert code == 1 and len(out.strip().splitlines()) == 1


def test_her_own_limit_is_the_scripts_and_a_bad_one_is_one_error(dataset: Path) -> None:
    words = ["train", f"data={dataset}", "model=yolov8n.yaml", "epochs=3", "imgsz=96"]
    code, out = run(["--dry-run", "--json", "-p", "a100", "-t", "1-12", *words])
    assert code == 0, out
    d = json.loads(out)
    assert d["time_limit_seconds"] == 36 * 3600 and "#SBATCH --time=2160\n" in d["script"]  # minutes
    for bad in ("abc", "0", "400-0"):
        code, out = run(["--dry-run", "-p", "a100", "-t", bad, *words])
        assert code != 0 and out.startswith("Error: ") and len(out.strip().splitlines()) == 1, out


def test_a_resumed_run_plans_what_a_new_run_of_its_epochs_left_plans(dataset: Path, tmp_path: Path) -> None:
    """``resume model=RUN/weights/last.pt``: the checkpoint's own arguments (its args.yaml) and the
    epochs its results.csv says are left; the job gets the words as typed."""
    run_dir = tmp_path / "runs" / "train"
    (run_dir / "weights").mkdir(parents=True)
    saved = f"task: detect\nmode: train\nmodel: yolov8n.yaml\ndata: {dataset}\nepochs: 10\nimgsz: 96\nbatch: 8\n"
    saved += "device: cpu\n"  # where it ran (a job's device is its own GPUs): not the resumed plan's
    (run_dir / "args.yaml").write_text(saved)
    (run_dir / "results.csv").write_text("epoch,time\n" + "".join(f"{i},{i}\n" for i in range(1, 5)))
    (run_dir / "weights" / "last.pt").write_bytes(b"a checkpoint")
    last = run_dir / "weights" / "last.pt"
    base = ["--dry-run", "--json", "-p", "t4"]
    code, out = run([*base, "train", "resume", f"model={last}"])
    assert code == 0, out
    resumed = json.loads(out)
    code, out = run([*base, "train", f"data={dataset}", "model=yolov8n.yaml", "epochs=6", "imgsz=96", "batch=8"])
    fresh = json.loads(out)
    assert (
        resumed["pixels"] == fresh["pixels"] and resumed["predicted_train_seconds"] == fresh["predicted_train_seconds"]
    )
    assert f"train resume model={last}" in resumed["script"]
