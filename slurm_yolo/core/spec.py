"""The ultralytics argument set: parse and validate ``[TASK] MODE key=value ...`` like ``yolo train``.

The keys, their defaults and their types are those of ultralytics 8.4.190 (``data/ultralytics_cfg.json``,
checked against the installed ultralytics by a test), so validating a command never imports ultralytics.
The original tokens are kept: the job receives exactly what the user typed.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from slurm_yolo.core.errors import UsageError

MAX_VALUE_LEN = 4096
MAX_BATCH = 1_000_000  # ultralytics clamps a batch to the dataset; past this it is a typo, and overflows the math
MAX_DEVICES = 1024
AUTO_BATCH = 16  # what a batch of -1 or a memory fraction means for the token math (ultralytics on CPU)
STRIDE = 32  # ultralytics rounds imgsz up to the model's largest stride


@cache
def ultralytics_cfg() -> dict[str, Any]:
    """The bundled ultralytics configuration schema."""
    return json.loads((Path(__file__).resolve().parents[1] / "data" / "ultralytics_cfg.json").read_text())


class TrainSpec(NamedTuple):
    """A validated ultralytics command line."""

    task: str | None
    mode: str
    args: dict[str, Any]  # typed values the user gave
    tokens: tuple[str, ...] = ()  # the user's own words, forwarded to the job unchanged

    def get(self, key: str) -> Any:
        """The value ultralytics would use: the user's, else ultralytics' default."""
        if key in self.args:
            return self.args[key]
        return ultralytics_cfg()["defaults"].get(key)

    @property
    def model(self) -> str:
        model = self.get("model")
        if model:
            return str(model)
        return f"yolo26n{_TASK_SUFFIX.get(self.task or 'detect', '')}.pt"  # ultralytics' TASK2MODEL

    @property
    def imgsz(self) -> int:
        """Training size as ultralytics uses it: rounded up to the stride."""
        value = self.get("imgsz")
        size = max(value) if isinstance(value, (list, tuple)) else value
        return int(math.ceil(float(size) / STRIDE) * STRIDE)

    @property
    def batch(self) -> int:
        value = self.get("batch")
        if (isinstance(value, float) and value < 1) or value == -1:
            return AUTO_BATCH
        return int(value)

    @property
    def autobatch(self) -> float:
        """The GPU memory fraction AutoBatch fills (``batch=-1``: ultralytics' 0.60; ``batch=0.7``:
        0.7), or 0 for a batch given in images."""
        value = self.get("batch")
        if value == -1:
            return 0.60
        return float(value) if isinstance(value, float) and 0 < value < 1 else 0.0

    @property
    def epochs(self) -> int:
        return int(self.get("epochs"))

    @property
    def devices(self) -> int | None:
        """GPUs named by ``device=`` (None: not given; 0: cpu)."""
        if "device" not in self.args or self.args["device"] is None:
            return None
        return _device_count(self.args["device"])


_TASK_SUFFIX = {"segment": "-seg", "classify": "-cls", "pose": "-pose", "obb": "-obb"}


def smart_value(text: str) -> Any:
    """Type a CLI value the way ultralytics does (none/true/false, numbers, lists, else the string)."""
    low = text.lower()
    if low == "none":
        return None
    if low == "true":
        return True
    if low == "false":
        return False
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    if not text.startswith(("[", "(")):
        return text
    import ast  # lists only: keeps the common path light

    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text
    return value if isinstance(value, (int, float, list, tuple)) else text


def _closest(key: str, keys: list[str]) -> str:
    import difflib  # error path only

    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return f" (did you mean '{near[0]}'?)" if near else ""


def check_value(key: str, value: Any) -> Any:
    """``value`` if ultralytics takes it for ``key``, else UsageError naming it."""
    known = ultralytics_cfg()
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool)
    if key == "resume":
        if not isinstance(value, (bool, str)):
            raise UsageError(f"'resume={value}' must be True or the checkpoint to resume (path/to/last.pt)")
    elif key in known["bool_keys"]:
        if not isinstance(value, bool):
            raise UsageError(f"'{key}={value}' must be True or False")
    elif key in known["int_keys"]:
        if not isinstance(value, int) or isinstance(value, bool):
            raise UsageError(f"'{key}={value}' must be an integer")
        lowest = known["int_min"].get(key)
        if lowest is not None and value < lowest:
            raise UsageError(f"'{key}={value}' must be at least {lowest}")
    elif key == "fraction":
        if not is_num or not math.isfinite(value) or value <= 0 or (value > 1 and not float(value).is_integer()):
            raise UsageError(f"'fraction={value}' must be in (0, 1] or a whole number of images")
    elif key in known["fraction_keys"]:
        if not is_num or not 0.0 <= value <= 1.0:
            raise UsageError(f"'{key}={value}' must be a number between 0.0 and 1.0")
    elif key in known["float_keys"] and (not is_num or not math.isfinite(value)):
        raise UsageError(f"'{key}={value}' must be a number")
    if key == "imgsz":
        sizes = value if isinstance(value, (list, tuple)) else [value]
        if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and 32 <= s <= 8192 for s in sizes):
            raise UsageError(f"'imgsz={value}' must be a whole number of pixels between 32 and 8192")
    if key == "batch" and not (value == -1 or (0 < value < 1) or (value >= 1 and float(value).is_integer())):
        raise UsageError(f"'batch={value}' must be a positive whole number, -1 (auto) or a fraction of GPU memory")
    if key == "batch" and value > MAX_BATCH:
        raise UsageError(f"'batch={value}' is absurd (more than {MAX_BATCH})")
    if key == "epochs" and value > 100_000:
        raise UsageError(f"'epochs={value}' is absurd (more than 100000)")
    if key == "device" and value is not None and _device_count(value) is None:
        raise UsageError(f"'device={value}' must be cpu, mps, or GPU indices such as 0 or 0,1")
    return value


def _device_count(value: Any) -> int | None:
    """GPUs a ``device=`` value names, read as ultralytics' parse_device reads it (0: cpu or mps; None: not
    a CUDA device). The job trains on the GPUs Slurm allocates; the value only says how many to ask for."""
    text = str(value).lower()
    for remove in ("cuda:", "none", "(", ")", "[", "]", "'", " "):
        text = text.replace(remove, "")
    if text in ("cpu", "mps", ""):
        return 0
    items = [item for item in ("0" if text == "cuda" else text).split(",") if item]
    if not all((item.isascii() and item.isdigit()) or item == "-1" for item in items) or len(items) > MAX_DEVICES:
        return None
    return len(items)


def parse(words: list[str] | tuple[str, ...]) -> TrainSpec:
    """Parse ``[TASK] MODE key=value ...``; any problem raises UsageError naming it."""
    known = ultralytics_cfg()
    words = list(words)
    task = mode = None
    args: dict[str, Any] = {}
    keys = sorted(known["defaults"])
    for word in words:
        if any(ch in word for ch in "\n\r\x00"):
            raise UsageError(f"argument {word!r} contains a control character")
        if len(word) > MAX_VALUE_LEN:
            raise UsageError(f"argument '{word[:40]}...' is longer than {MAX_VALUE_LEN} characters")
        if word.startswith("-") and word.partition("=")[0].strip("-") not in known["defaults"]:
            raise UsageError(
                f"'{word}' is not a training key: yolo-sbatch's own options (yolo-sbatch --help) go before the"
                f" training words (yolo-sbatch {word} ... train key=value ...), and sbatch's others pass as"
                f" --sbatch-arg={word if '=' in word else word + '=VALUE'}"
            )
        if word == "yolo" and task is None and mode is None:
            raise UsageError(
                "drop 'yolo': yolo-sbatch takes the words that follow it (yolo-sbatch ... train key=value ...)"
            )
        if "=" in word:
            key, _, text = word.partition("=")
            key = key.strip().strip("-")
            if key not in known["defaults"] or key in ("task", "mode"):
                if key in ("task", "mode") and mode is None:
                    raise UsageError(f"give {key} as a word, not '{word}'")
                raise UsageError(f"unknown key '{key}'{_closest(key, keys)}")
            if key in args:
                raise UsageError(f"key '{key}' given twice")
            if text.strip() == "":
                raise UsageError(f"key '{key}' has no value")
            args[key] = check_value(key, smart_value(text.strip()))
        elif word in known["tasks"] and task is None and mode is None:
            task = word
        elif word in known["modes"] and mode is None:
            mode = word
        elif isinstance(known["defaults"].get(word), bool) and mode is not None:  # ultralytics: bare key=True
            if word in args:
                raise UsageError(f"key '{word}' given twice")
            args[word] = True
        else:
            valid = known["modes"] if mode is None else []
            hint = _closest(word, valid + known["tasks"]) if valid else ""
            raise UsageError(f"unexpected argument '{word}'{hint}: use key=value")
    if mode is None:
        raise UsageError(f"missing mode (one of {', '.join(known['modes'])})")
    if mode != "train":
        raise UsageError(f"yolo-sbatch submits training runs: mode '{mode}' is not supported")
    if "data" not in args and args.get("resume") in (None, False):
        raise UsageError("missing data=: the dataset yaml is needed to count images")
    return TrainSpec(task=task, mode=mode, args=args, tokens=tuple(words))
