"""Every ``yolo train`` key, and every yolo-sbatch option, fed a table of hostile values through
``yolo-sbatch --dry-run --json``: each answer is either one ``Error:`` line and a non-zero exit, or a clean
plan (exit 0, one JSON object) whose script hands the user's words to the launcher unchanged, so that
nothing a user types reaches a shell. Never a traceback, never a hang (FIFOs, /dev/zero, /proc, loops)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import REPO

from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core.spec import ultralytics_cfg

SHELL = (
    "$(touch {tmp}/pwned)",
    "`touch {tmp}/pwned`",
    "a;touch {tmp}/pwned",
    "a|touch {tmp}/pwned",
    "a&&touch {tmp}/pwned",
    "x' ; touch {tmp}/pwned ; '",
    'x" ; touch {tmp}/pwned ; "',
    "$HOME",
    "*",
    "\\",
    "a b",
    "-x",
    "--help",
)
HOSTILE = (
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1e308",
    "-1e308",
    "1e309",
    str(10**30),
    str(-(10**30)),
    "-1",
    "0",
    "0.0",
    "-0",
    "1e-320",
    "0x10",
    "1_000",
    "[]",
    "()",
    "[nan]",
    "[inf]",
    "[1e308]",
    "[-1]",
    "[0,1,2,3,4,5,6,7,8]",
    "[[[1]]]",
    "[" * 200,
    "(1,",
    "{}",
    "None",
    "True",
    "False",
    " ",
    "ü€😀",
    "\u202e",
    "\x7f",
    "x" * 4000,
    "a\nb",
    "a\rb",
    "a\tb",
    *SHELL,
    # paths: a symlink loop, a FIFO (opening it would block), endless or special files, a folder holding a loop
    "{tmp}/loop",
    "{tmp}/fifo",
    "/dev/zero",
    "/dev/null",
    "/proc",
    "/proc/self/root",
    "/",
    "..",
    "~nosuchuser9/x",
    "{tmp}/loopy",
    "{tmp}/" + "d/" * 2000,
)
OPTIONS = (
    "--partition",
    "--gpus",
    "--deadline",
    "--priority",
    "--flops-factor",
    "--wait-timeout",
    "--account",
    "--job-name",
    "--output",
    "--error",
    "--mail-type",
    "--mail-user",
    "--dependency",
    "--begin",
    "--constraint",
    "--sbatch-arg",
)
DUMP = '#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done > "$ARGV_FILE"\n'


@pytest.fixture
def hostile_home(tmp_path: Path, site_config: Path, dataset: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundled config with a launcher that only records its argv; the paths HOSTILE names; a
    working folder of its own (where a job's log would go)."""
    launcher = tmp_path / "argv-dump"
    launcher.write_text(DUMP)
    launcher.chmod(0o755)
    text = site_config.read_text().replace(f'python = "{sys.executable}"', f'python = "{launcher}"')
    site_config.write_text(text)
    os.symlink(tmp_path / "loop", tmp_path / "loop")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "loopy").mkdir()
    os.symlink(tmp_path / "loopy", tmp_path / "loopy" / "again")
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(tmp_path / "cfg"))
    return tmp_path


def verdict(
    code: int, out: str, exc: BaseException | None, words: list[str], tmp: Path, stdout: str | None = None
) -> str | None:
    """What is wrong with one answer (None: it is one of the two allowed). ``out`` is what the user
    saw, ``stdout`` (when apart) the JSON alone: beside a plan, stderr may only hold warning lines."""
    if exc is not None and not isinstance(exc, SystemExit):
        return f"raised {type(exc).__name__}: {exc}"
    if "Traceback" in out:
        return "printed a traceback"
    if code != 0:
        lines = out.strip().splitlines()
        return (
            None
            if len(lines) == 1 and lines[0].startswith("Error: ")
            else f"exit {code} without one Error line: {out[:300]!r}"
        )
    if stdout is not None:
        extra = [line for line in out.replace(stdout, "", 1).splitlines() if line.strip()]
        if any(not line.startswith("warning: ") for line in extra):
            return f"exit 0 with more than JSON and warnings: {out[:300]!r}"
        out = stdout
    try:
        plan = json.loads(out)
    except ValueError:
        return f"exit 0 without one JSON object: {out[:300]!r}"
    line = next(x for x in plan["script"].splitlines() if " -m slurm_yolo run -- " in x)
    try:
        argv = shlex.split(line.removesuffix(" &"))
    except ValueError as e:
        return f"the launcher line is not shell words ({e}): {line[:300]!r}"
    if argv[1:5] != ["-m", "slurm_yolo", "run", "--"] or argv[5:] != words:
        return f"the launcher would get {argv[5:]!r}, not {words!r}"
    if any(ch in "".join(words) for ch in "$`;|&'\"\\*"):
        return run_script(plan["script"], words, tmp)
    return None


def run_script(script: str, words: list[str], tmp: Path) -> str | None:
    """Run the job script with bash (its launcher records argv): the words arrive whole, nothing executes."""
    argv_file = tmp / "argv"
    argv_file.unlink(missing_ok=True)
    env = {"PATH": "/usr/bin:/bin", "ARGV_FILE": str(argv_file), "HOME": str(tmp)}
    res = subprocess.run(
        ["bash", "-c", script], cwd=tmp / "work", env=env, capture_output=True, text=True, timeout=30, check=False
    )
    got = argv_file.read_bytes().decode().split("\0")[:-1] if argv_file.exists() else None
    if res.returncode != 0 or got != ["-m", "slurm_yolo", "run", "--", *words]:
        return f"bash ran the script to {res.returncode} with argv {got!r}: {res.stderr[-300:]!r}"
    if (tmp / "pwned").exists():
        return "the script executed a user's value"
    return None


def command(key: str, value: str, dataset: Path) -> list[str]:
    base = {"data": str(dataset), "model": "yolov8n.yaml", "epochs": "1", "imgsz": "64"}
    base[key] = value
    return ["train", *(f"{k}={v}" for k, v in base.items())]


@pytest.mark.parametrize("key", sorted(ultralytics_cfg()["defaults"]))
def test_every_train_key(key: str, hostile_home: Path, dataset: Path) -> None:
    problems = []
    for raw in HOSTILE:
        value = raw.replace("{tmp}", str(hostile_home))
        words = command(key, value, dataset)
        res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "--json", "-p", "a100", *words])
        why = verdict(res.exit_code, res.output, res.exception, words, hostile_home, res.stdout)
        if why:
            problems.append(f"{key}={value[:60]!r}: {why}")
    assert not (hostile_home / "pwned").exists()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("option", OPTIONS)
def test_every_option(option: str, hostile_home: Path, dataset: Path) -> None:
    problems = []
    words = command("epochs", "1", dataset)
    for raw in HOSTILE:
        value = raw.replace("{tmp}", str(hostile_home))
        res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "--json", "-p", "a100", f"{option}={value}", *words])
        why = verdict(res.exit_code, res.output, res.exception, words, hostile_home, res.stdout)
        if why:
            problems.append(f"{option}={value[:60]!r}: {why}")
    assert not (hostile_home / "pwned").exists()
    assert not problems, "\n".join(problems)


DATA_YAMLS = {
    "train: /proc\nval: /proc\n": "kernel pseudo-filesystem",
    "train: /dev/zero\nval: /dev/zero\n": "neither a folder nor an image list",
    "train: {tmp}/fifo\nval: {tmp}/fifo\n": "neither a folder nor an image list",
    "train: {tmp}/loop\nval: {tmp}/loop\n": "too many levels of symbolic links",
    "train: {tmp}/loopy\nval: {tmp}/loopy\n": "the train split has 0 images",
    "path: /proc/self/root\ntrain: proc\nval: proc\n": "kernel pseudo-filesystem",
    "train: [" + "[" * 5000 + "\n": "is not readable YAML",
    "train: !!python/object/apply:os.system ['touch {tmp}/pwned']\n": "is not readable YAML",
    "train: &a [*a]\nval: x\n": "must be a path",
    "train: 1.0e+308\nval: .nan\n": "must be a path",
    "\xff\xfe\x00": "is not readable YAML",
}


@pytest.mark.parametrize("text", list(DATA_YAMLS))
def test_hostile_data_yaml(text: str, hostile_home: Path) -> None:
    y = hostile_home / "data.yaml"
    y.write_bytes(text.replace("{tmp}", str(hostile_home)).encode("utf-8", "surrogateescape"))
    res = CliRunner().invoke(yolo_sbatch, ["--dry-run", "--json", "-p", "a100", "train", f"data={y}"])
    assert verdict(res.exit_code, res.output, res.exception, [], hostile_home, res.stdout) is None, res.output
    assert res.exit_code != 0 and DATA_YAMLS[text] in res.output, res.output
    assert not (hostile_home / "pwned").exists()


@pytest.mark.parametrize(
    ("args", "ok"),
    [
        (["data={ds}", "fraction=nan"], False),
        (["data={tmp}/loop"], False),
        (["data={ds}", "project={tmp}/fifo"], False),
        (["data=coco8.yaml", "name=$(touch {tmp}/pwned)"], True),
        (["data={ds}", "device=0,1,2,3,4,5,6,7,8"], False),
    ],
)
def test_as_a_user_runs_it(args: list[str], ok: bool, hostile_home: Path, dataset: Path) -> None:
    """The real command in a process of its own: errors are one line on stderr, plans one JSON object on stdout."""
    words = ["train", *(a.replace("{ds}", str(dataset)).replace("{tmp}", str(hostile_home)) for a in args)]
    code = "from slurm_yolo.cli.yolo_sbatch import main; main()"
    res = subprocess.run(
        [sys.executable, "-c", code, "--dry-run", "--json", "-p", "a100", *words],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    if ok:
        # (coco8.yaml and the default yolo26n.pt are not staged for the offline nodes: a warning says so)
        assert res.returncode == 0 and all(x.startswith("warning: ") for x in res.stderr.splitlines()), res.stderr
        assert verdict(0, res.stdout, None, words, hostile_home) is None
    else:
        lines = res.stderr.splitlines()
        assert res.returncode == 1 and res.stdout == "" and len(lines) == 1 and lines[0].startswith("Error: "), (
            res.stderr
        )
    assert not (hostile_home / "pwned").exists()
