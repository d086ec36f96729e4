"""docs/reference.md and the man pages are what the commands' own --help says (regenerated in memory)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_yolo.cli import reference

README = Path(__file__).resolve().parents[2] / "docs" / "reference.md"


def test_readme_command_reference_is_current() -> None:
    assert reference.is_current(README.read_text(encoding="utf-8")), (
        "docs/reference.md is stale: python -m slurm_yolo.cli.reference --write"
    )


def test_every_command_is_in_it_with_help() -> None:
    text = README.read_text(encoding="utf-8")
    section = text[text.index(reference.START) : text.index(reference.END)]
    paths = [path for path, _ in reference.commands()]
    assert {"yolo-sbatch", "slurm-yolo", "slurm-yolo ledger deposit", "slurm-yolo watch", "slurm-yolo metrics"} <= set(
        paths
    )
    for path, help_text in reference.commands():
        assert f"## `{path}`" in section
        assert help_text.startswith(f"Usage: {path} "), path


def test_independent_of_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    narrow = reference.render()
    monkeypatch.setenv("COLUMNS", "300")
    assert reference.render() == narrow


def test_replace_needs_both_markers_once() -> None:
    for text in ("no markers", reference.START, f"{reference.START}{reference.END}{reference.START}"):
        with pytest.raises(ValueError, match="markers"):
            reference.replace(text, "x")
    assert (
        reference.replace(f"a{reference.START}old{reference.END}b", "new")
        == f"a{reference.START}\nnew\n{reference.END}b"
    )


def test_check_and_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "README.md"
    stale.write_text(f"intro\n{reference.START}\nold\n{reference.END}\nend\n", encoding="utf-8")
    assert reference.main(["--check", str(stale)]) == 1
    assert reference.main(["--write", str(stale)]) == 0
    assert reference.main(["--check", str(stale)]) == 0
    assert stale.read_text(encoding="utf-8").startswith("intro\n") and stale.read_text(encoding="utf-8").endswith(
        "\nend\n"
    )
    assert reference.main(["--bogus"]) == 2


def test_the_same_after_the_commands_ran() -> None:
    """click caches a command's help option at its first run: the reference must not depend on it."""
    from click.testing import CliRunner

    from slurm_yolo.cli.admin import main as admin
    from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch

    before = reference.render()
    for cmd in (yolo_sbatch, admin):
        CliRunner().invoke(cmd, ["-h"])
    assert reference.render() == before and "-h, --help" in before


def test_man_pages_hold_every_commands_help_and_man_reads_them(tmp_path: Path) -> None:
    import shutil
    import subprocess

    written = reference.write_man(tmp_path / "man1")
    assert [p.name for p in written] == ["yolo-sbatch.1", "slurm-yolo.1"]
    page = (tmp_path / "man1" / "slurm-yolo.1").read_text(encoding="utf-8")
    for path, _ in reference.commands():
        if path.startswith("slurm-yolo "):
            assert f".SS {path}\n" in page
    if shutil.which("man"):
        out = subprocess.run(
            ["man", "-l", str(tmp_path / "man1" / "yolo-sbatch.1")],
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "MANWIDTH": "100", "MAN_KEEP_FORMATTING": "0"},
            check=True,
        )
        assert "Usage: yolo-sbatch [OPTIONS]" in out.stdout and "--deadline" in out.stdout
