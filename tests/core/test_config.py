"""The TOML config: defaults, overrides with their origin, strictness."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.core import config
from slurm_yolo.core.errors import UsageError


def test_defaults_without_a_file(home: Path) -> None:
    cfg = config.load()
    assert cfg.path is None and cfg.estimate.buffer == 0.2
    assert cfg.state_dir == home and cfg.sources["paths.state_dir"] == "env SLURM_YOLO_HOME"
    assert cfg.partition("nowhere").gpu_type == ""  # unknown partitions plan bare


def test_file_overrides_and_sources(home: Path) -> None:
    (home / "config.toml").write_text(
        "[estimate]\nbuffer = 0.3\n[partitions.a]\ngpu_type = 'h100'\ngpus_per_node = 8\n"
    )
    cfg = config.load()
    assert cfg.estimate.buffer == 0.3
    assert cfg.sources["estimate.buffer"] == str(home / "config.toml")
    assert cfg.partition("a").gpus_per_node == 8


def test_config_env_var(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.toml"
    f.write_text("[qos]\nshort = 'fast'\n")
    monkeypatch.setenv("SLURM_YOLO_CONFIG", str(f))
    assert config.load().qos.short == "fast"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[estimat]\nbuffer=1\n", "unknown section [estimat]"),
        ("[estimate]\nbufer=1\n", "unknown key estimate.bufer"),
        ("[estimate]\nbuffer='x'\n", "expected float"),
        ("[partitions.a]\ngpus=2\n", "unknown key partitions.a.gpus"),
        ("[estimate\n", "config"),
        ("[estimate]\ndefault_priority='urgent'\n", "default_priority"),
        ("[ledger]\nexempt_partitions='debug'\n", "exempt_partitions: expected a list of names"),
        ("[ledger]\nexempt_accounts=['ops', 'a b']\n", "exempt_accounts: expected a list of names"),
        ("[ledger]\nexempt_accounts=[1]\n", "exempt_accounts: expected a list of names"),
    ],
)
def test_bad_config_is_clear(home: Path, text: str, message: str) -> None:
    (home / "config.toml").write_text(text)
    with pytest.raises(UsageError, match=message.replace("[", r"\[")):
        config.load()


def test_config_show(site_config: Path) -> None:
    res = CliRunner().invoke(admin, ["config", "show"])
    assert res.exit_code == 0, res.output
    assert f"config file: {site_config}" in res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("partitions.a100.gpu_type"))
    assert "'a100'" in line and str(site_config) in line
    line = next(ln for ln in res.output.splitlines() if ln.startswith("estimate.k "))
    assert line.rstrip().endswith("default")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("[ledger]\nprolog_errors = 'open'\n", "ledger.prolog_errors is no longer a setting (a prolog that cannot"),
        ("[ledger]\ncluster = 'old'\n", "ledger.cluster is no longer a setting (runs are keyed by Slurm's own"),
        ("[hookd]\nworkers = 8\n", "hookd.workers is no longer a setting (one settler thread"),
    ],
)
def test_a_retired_key_is_refused_with_what_replaced_it(home: Path, text: str, why: str) -> None:
    (home / "config.toml").write_text(text)
    with pytest.raises(UsageError, match="remove it") as e:
        config.load()
    assert why in str(e.value)


def test_settings_are_typed_and_frozen(home: Path) -> None:
    """Each section is a frozen dataclass of the schema's types: an int where a float is asked comes in
    as a float, and code cannot change a setting under the other readers of the same config."""
    (home / "config.toml").write_text("[estimate]\nbuffer = 1\n[qos]\nprod = 'gold'\n")
    cfg = config.load()
    assert isinstance(cfg.estimate.buffer, float) and cfg.estimate.buffer == 1.0
    assert cfg.qos.of("prod") == "gold" and cfg.values["qos"]["prod"] == "gold"
    with pytest.raises(AttributeError):
        cfg.estimate.buffer = 0.5  # type: ignore[misc]
    assert set(config.DEFAULTS) == set(config.SECTIONS) and config.DEFAULTS["ledger"]["backend"] == "sqlite"


def test_exempt_lists_are_read_as_names(home: Path) -> None:
    (home / "config.toml").write_text("[ledger]\nexempt_partitions = ['debug']\nexempt_accounts = ['Ops', 'staff']\n")
    led = config.load().ledger
    assert (led.exempt_partitions, led.exempt_accounts) == (("debug",), ("Ops", "staff"))
