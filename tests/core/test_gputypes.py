"""GPU types: the spellings sites give GRES types and cards, and what a partition's config says."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_yolo.core import config as config_mod
from slurm_yolo.core import gputypes
from slurm_yolo.core.config import Partition
from slurm_yolo.core.errors import UsageError
from slurm_yolo.core.model import gpu_priors


@pytest.mark.parametrize(
    ("spelling", "name", "memory"),
    [
        ("a100", "a100", 40),
        ("a100_80g", "a100_80g", 80),
        ("nvidia_a100-sxm4-80gb", "a100_80g", 80),
        ("NVIDIA A100-SXM4-40GB", "a100", 40),
        ("tesla_v100", "v100", 16),
        ("Tesla V100-SXM2-32GB", "v100_32g", 32),
        ("v100s", "v100_32g", 32),
        ("nvidia_h100_80gb_hbm3", "h100", 80),
        ("h100_pcie", "h100_pcie", 80),
        ("NVIDIA H200", "h200", 141),
        ("t4", "t4", 16),
        ("Tesla T4", "t4", 16),
        ("l4", "l4", 24),
        ("l40s", "l40s", 48),
        ("a10g", "a10", 24),
        ("NVIDIA GeForce RTX 3090", "rtx3090", 24),
        ("rtx4090", "rtx4090", 24),
        ("NVIDIA RTX A6000", "rtx_a6000", 48),
    ],
)
def test_a_spelling_names_its_type_and_memory(spelling: str, name: str, memory: float) -> None:
    found, mem, share = gputypes.identify(spelling)
    assert found is not None and found.name == name
    assert mem == memory and share == 1.0


def test_a_mig_slice_has_its_own_memory_and_a_share_of_the_compute() -> None:
    found, mem, share = gputypes.identify("nvidia_a100_3g.20gb")
    assert found is not None and found.name == "a100"
    assert mem == 20 and share == pytest.approx(3 / 7)


@pytest.mark.parametrize("spelling", ["gpu", "mi250", "a100x", "rtx", "", "t40"])
def test_unknown_spellings_are_unknown(spelling: str) -> None:
    assert gputypes.identify(spelling)[0] is None


def test_a_partition_card_from_gpu_like_gpu_tflops_or_cpu() -> None:
    assert gputypes.card(Partition("p", gpu_type="gpu", gpu_like="a100")).type == gputypes.TYPES["a100"]
    own = gputypes.card(Partition("p", gpu_type="mi250", gpu_tflops=383.0, gpu_memory_gb=64.0))
    assert own.type is not None and own.type.tflops == 383.0 and own.memory_gb == 64.0
    cpu = gputypes.card(Partition("p", gpu_type="a100", gpu_like="cpu"))
    assert cpu.cpu and cpu.type is None
    assert gputypes.unknown_line(Partition("p", gpu_type="a100", gpu_like="cpu")) == ""
    line = gputypes.unknown_line(Partition("p", gpu_type="mi250"))
    assert "mi250 is not known" in line and "partitions.p.gpu_like" in line


@pytest.mark.parametrize("spelling", ["a100_0g.0gb", "a100_9g.1gb", "a100_3g.0gb"])
def test_an_impossible_mig_profile_is_no_slice(spelling: str) -> None:
    """An admin's typo of a MIG profile must not plan on a card of no compute or no memory."""
    found, mem, share = gputypes.identify(spelling)
    assert found is not None and found.name == "a100" and (mem, share) == (40.0, 1.0)


def test_gpu_like_is_read_as_people_type_it() -> None:
    assert gputypes.card(Partition("p", gpu_type="a100", gpu_like=" CPU ")).cpu
    assert gputypes.card(Partition("p", gpu_type="gpu", gpu_like="A100")).type == gputypes.TYPES["a100"]


def test_a_sites_own_tflops_take_the_law_never_a_known_types_fit() -> None:
    """gpu_tflops on a partition whose GRES type is a known card: the site's figures decide its k."""
    priors = gpu_priors.shipped()
    law = priors["k"]["law"]
    card = gputypes.card(Partition("p", gpu_type="a100", gpu_tflops=50.0, gpu_memory_gb=40.0))
    k, why = gpu_priors.k_for(card, priors)
    assert k == pytest.approx(law["k_at_100_tflops"] * 0.5 ** -law["tflops_exponent"]) and "50 dense FP16" in why


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gpu_tflops", "nan"),
        ("gpu_tflops", "-1.0"),
        ("gpu_tflops", "1e308"),
        ("gpu_memory_gb", "-5.0"),
        ("gpu_memory_gb", "1e-300"),
        ("gpu_memory_gb", "inf"),
    ],
)
def test_impossible_card_figures_are_refused_at_load(key: str, value: str, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f'[partitions.p]\ngpu_type = "zzcard"\n{key} = {value}\n')
    with pytest.raises(UsageError, match=f"partitions.p.{key}"):
        config_mod.load(path, env={})


def test_card_key_names_what_a_fit_was_learned_on() -> None:
    from slurm_yolo.core.config import Partition

    assert gputypes.card_key(Partition("t4", gpu_type="t4", gpu_like="cpu")) == "cpu"
    assert gputypes.card_key(Partition("t4", gpu_type="t4")) == "t4"
    assert gputypes.card_key(Partition("x", gpu_type="nvidia_a100-sxm4-80gb")) == "a100_80g"
    assert gputypes.card_key(Partition("m", gpu_type="a100_3g.20gb")) == "a100@0.429"
    assert gputypes.card_key(Partition("s", gpu_type="zz", gpu_tflops=50.0, gpu_memory_gb=8.0)) == "tflops:50"
    assert gputypes.card_key(Partition("u", gpu_type="mi250")) == "unknown:mi250"
