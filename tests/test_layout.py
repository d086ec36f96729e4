"""The tree says where code runs: docs/layout.md names every module in its folder, and the import
contracts (pyproject.toml, ``lint-imports``) hold on the package and break on a planted crossing."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_yolo.state import availability

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "slurm_yolo"
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"  # the [lint] extra, beside this Python


def _documented() -> dict[str, set[str]]:
    """Each folder's bullet in layout.md (**`login/`**, ...) and the names it puts in backticks."""
    text = (REPO / "docs" / "layout.md").read_text()
    bullets = re.findall(r"^- \*\*`(\w+)/`\*\*(.*?)(?=^- |^## |\Z)", text, flags=re.M | re.S)
    return {folder: set(re.findall(r"`([\w./]+)`", body)) for folder, body in bullets}


def _modules(folder: Path) -> set[str]:
    """The modules and subpackages of a role or layer folder, as layout.md names them."""
    names = set()
    for path in folder.iterdir():
        if path.suffix in (".py", ".lua") and path.stem != "__init__":
            names.add(path.name if path.suffix == ".lua" else path.stem)
        elif path.is_dir() and (path / "__init__.py").exists():
            names.add(f"{path.name}/")
    return names


def test_layout_names_every_module_in_its_folder() -> None:
    documented = _documented()
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert set(documented) == folders
    for folder in folders:
        missing = _modules(PACKAGE / folder) - documented[folder]
        assert not missing, f"docs/layout.md does not name {sorted(missing)} under {folder}/"


def test_tests_mirror_the_package() -> None:
    """Each folder of tests/ is a folder of the package (besides the data the tests read)."""
    data = {"recorded", "golden", "vectors", "__pycache__"}
    folders = {p.name for p in (REPO / "tests").iterdir() if p.is_dir() and p.name not in data}
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders and folders <= packages, sorted(folders - packages)


def _lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")],
        cwd=root,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("layout")
    shutil.copytree(PACKAGE, root / "slurm_yolo", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root)
    return root


def test_the_contracts_hold_on_the_package(copy: Path) -> None:
    res = _lint_imports(copy)
    assert res.returncode == 0 and "0 broken" in res.stdout, res.stdout + res.stderr


def test_a_planted_login_to_controller_import_breaks_them(copy: Path) -> None:
    plan = copy / "slurm_yolo" / "login" / "plan.py"
    kept = plan.read_text()
    try:
        plan.write_text(kept + "\nfrom slurm_yolo.controller import hooks  # noqa: E402, F401\n")
        res = _lint_imports(copy)
    finally:
        plan.write_text(kept)
    assert res.returncode != 0, res.stdout
    assert "slurm_yolo.login.plan -> slurm_yolo.controller.hooks" in res.stdout, res.stdout


def test_the_admission_entry_is_short_and_the_package_lets_the_formatter_win() -> None:
    """job_submit.lua's entry stays under 100 lines (its modules hold the rest), and the package keeps
    at most a handful of ``# fmt: skip`` (none today) and no config["section"] lookup outside the settings."""
    assert len(availability.lua_source("job_submit.lua").splitlines()) < 100
    sources = {p: p.read_text() for p in PACKAGE.rglob("*.py")}
    assert sum(text.count("# fmt: skip") for text in sources.values()) <= 10
    lookups = [p for p, text in sources.items() if re.search(r"\bconfig\[\"", text) and p.name != "config.py"]
    assert not lookups, lookups
