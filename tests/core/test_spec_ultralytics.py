"""yolo-sbatch's reading of ``yolo`` command lines against ultralytics' own (``ultralytics.cfg``).

Each line of tests/recorded/ultralytics_doc_commands.txt is read as ultralytics' entrypoint reads it, with
its own helpers (merge_equals_args, parse_key_value_pair, check_dict_alignment, cfg2dict, get_cfg,
check_imgsz, TASK2DATA / TASK2MODEL) but without loading a model or training, and as ``spec.parse``
reads it: the two agree on task, epochs, imgsz, batch, data, model, time and the optimizer's validity,
and a line ultralytics refuses is refused. Runs where ultralytics is installed (the [train] extra); the
login path never imports it.
"""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from slurm_yolo.core import spec
from slurm_yolo.core.errors import UsageError

COMMANDS = Path(__file__).resolve().parents[1] / "recorded" / "ultralytics_doc_commands.txt"
ucfg = pytest.importorskip("ultralytics.cfg")


def lines() -> list[tuple[str, str]]:
    """(command, why it is refused or '') of the data file."""
    out = []
    for raw in COMMANDS.read_text().splitlines():
        if not raw.strip() or raw.startswith("#"):
            continue
        command, _, note = raw.partition("  # refused: ")
        out.append((command.strip(), note.strip()))
    return out


def trainer_optimizers() -> set[str]:
    """The names ultralytics' BaseTrainer.build_optimizer takes (a local set in its source)."""
    from ultralytics.engine.trainer import BaseTrainer

    found = re.search(r"optimizers = \{([^}]*)\}", inspect.getsource(BaseTrainer.build_optimizer))
    assert found, "build_optimizer's list moved"
    return {name.strip().strip("\"'") for name in found.group(1).split(",")}


def ultralytics_reading(words: list[str]) -> dict[str, Any]:
    """The training arguments ultralytics' entrypoint would hand its trainer (its steps, in its order)."""
    from ultralytics.nn.tasks import guess_model_task
    from ultralytics.utils.checks import check_imgsz

    full = {**ucfg.DEFAULT_CFG_DICT, **dict.fromkeys((*ucfg.TASKS, *ucfg.MODES))}
    overrides: dict[str, Any] = {}
    for a in ucfg.merge_equals_args(words):
        if a.startswith("--"):
            a = a[2:]
        if a.endswith(","):
            a = a[:-1]
        if "=" in a:
            k, v = ucfg.parse_key_value_pair(a)
            if k == "cfg" and v is not None:
                overrides = {**{k: x for k, x in ucfg.cfg2dict(v).items() if k != "cfg"}, **overrides}
            else:
                overrides[k] = v
        elif a in ucfg.TASKS:
            overrides["task"] = a
        elif a in ucfg.MODES:
            overrides["mode"] = a
        elif a in ucfg.DEFAULT_CFG_DICT and isinstance(ucfg.DEFAULT_CFG_DICT[a], bool):
            overrides[a] = True
        else:
            raise SyntaxError(f"'{a}'")
    ucfg.check_dict_alignment(full, overrides)
    mode = overrides.pop("mode", None) or ucfg.DEFAULT_CFG.mode
    task = overrides.pop("task", None)
    if task and "model" not in overrides:
        overrides["model"] = ucfg.TASK2MODEL[task]
    model = overrides.pop("model", ucfg.DEFAULT_CFG.model) or "yolo26n.pt"
    guessed = guess_model_task(model)
    says = any(s in Path(model).stem for s in ("-sem", "-seg", "-cls", "-pose", "-obb", "-depth"))
    task = guessed if says or not task or re.match(r"yolo(v\d+|\d+)[nsmlx]", Path(model).stem) else task
    if overrides.get("data") is None and not overrides.get("resume"):
        overrides["data"] = ucfg.TASK2DATA[task]
    cfg = ucfg.get_cfg(ucfg.DEFAULT_CFG, {**overrides, "model": model, "task": task, "mode": mode})
    imgsz = check_imgsz(cfg.imgsz, stride=32, floor=32, max_dim=1)
    return {
        "mode": mode,
        "task": task,
        "model": model,
        "data": None if cfg.data is None else str(cfg.data),
        "epochs": cfg.epochs,
        "imgsz": imgsz[0] if isinstance(imgsz, list) else imgsz,
        "batch": cfg.batch,
        "time": cfg.time,
        "optimizer_ok": str(cfg.optimizer).lower() in {o.lower() for o in trainer_optimizers()},
    }


def ours(s: spec.TrainSpec) -> dict[str, Any]:
    return {
        "mode": s.mode,
        "task": s.model_task,
        "model": s.model,
        "data": s.data,
        "epochs": s.epochs,
        "imgsz": s.imgsz,
        "batch": s.get("batch"),
        "time": s.get("time"),
        "optimizer_ok": True,  # a spec that parsed has one of the trainer's optimizers
    }


@pytest.fixture
def copied_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The file ``yolo copy-cfg`` writes, in the folder the command runs in."""
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "default_copy.yaml"
    shutil.copy(ucfg.DEFAULT_CFG_PATH, target)
    return target


def test_the_bundled_optimizers_are_the_trainers() -> None:
    assert set(spec.ultralytics_cfg()["optimizers"]) == trainer_optimizers()


def test_the_bundled_task_defaults_are_ultralytics() -> None:
    assert spec.ultralytics_cfg()["task2data"] == ucfg.TASK2DATA
    assert spec.ultralytics_cfg()["task2model"] == ucfg.TASK2MODEL


@pytest.mark.parametrize(("command", "refused"), lines(), ids=[c for c, _ in lines()])
def test_the_plan_reads_each_doc_command_as_ultralytics(command: str, refused: str, copied_cfg: Path) -> None:
    words = command.replace("{cfg}", str(copied_cfg)).split(" ")[1:]  # the shell's words, past `yolo`
    words = [w for w in words if w]
    try:
        theirs: dict[str, Any] | None = ultralytics_reading(words)
    except (SyntaxError, ValueError, TypeError, KeyError) as e:
        theirs, why = None, e
    try:
        mine: dict[str, Any] | None = ours(spec.parse(words))
    except UsageError as e:
        mine, error = None, str(e)
        assert "\n" not in error
    if refused or (theirs is not None and not theirs["optimizer_ok"]):
        assert mine is None, f"{command}: ultralytics' trainer refuses it ({refused}), yolo-sbatch planned it"
        return
    if theirs is None:
        assert mine is None, f"{command}: ultralytics refuses it ({why}), yolo-sbatch planned {mine}"
        return
    assert mine is not None, f"{command}: ultralytics runs it, yolo-sbatch refused: {error}"
    assert mine == theirs, command
