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
    args: dict[str, Any]  # typed values the user gave (a cfg= file's included, the command line's over them)
    tokens: tuple[str, ...] = ()  # the user's own words, forwarded to the job unchanged

    def get(self, key: str) -> Any:
        """The value ultralytics would use: the user's, else ultralytics' default (``model`` and ``data``:
        the task's, as its entrypoint fills them in)."""
        if key == "model":
            return self.model
        if key == "data":
            return self.data
        if key in self.args:
            return self.args[key]
        return ultralytics_cfg()["defaults"].get(key)

    @property
    def model(self) -> str:
        """ultralytics' entrypoint: the model given; none, the task's TASK2MODEL; given as None (a cfg=
        file's ``model:``), its fallback yolo26n.pt."""
        if "model" in self.args:
            model = self.args["model"]
            return str(model) if model not in (None, "") else "yolo26n.pt"
        return str(ultralytics_cfg()["task2model"].get(self.task or "detect", "yolo26n.pt"))

    @property
    def model_task(self) -> str:
        """The task the model trains, as ultralytics guesses it from the name (its guess_model_task), else
        the task given, else detect: what picks a missing data='s default."""
        return model_task(self.model) or self.task or "detect"

    @property
    def data(self) -> str | None:
        """``data=``, else (not resuming) the task's TASK2DATA, as ultralytics' entrypoint picks it."""
        value = self.args.get("data")
        if value is None and not self.args.get("resume"):
            return str(ultralytics_cfg()["task2data"][self.model_task])
        return None if value is None else str(value)

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


# ultralytics' guess_model_task from a model's file name, in its order: "-sem" before "-seg"
_NAME_TASKS = (
    ("-sem", "semantic"),
    ("-seg", "segment"),
    ("-cls", "classify"),
    ("-pose", "pose"),
    ("-obb", "obb"),
    ("-depth", "depth"),
)


def model_task(model: str) -> str:
    """The task ultralytics reads in a model's name: a standard model's (yolo26n.pt: detect), else its
    guess_model_task's name rules ('' when the name does not say: the checkpoint's own)."""
    from slurm_yolo.core.model.estimate import task_of  # estimate imports this module

    if known := task_of(model):
        return known
    path = Path(model)
    for suffix, task in _NAME_TASKS:
        if suffix in path.stem or task in path.parts:
            return task
    return "detect" if "detect" in path.parts else ""


def smart_value(text: str) -> Any:
    """Type a CLI value the way ultralytics' smart_value does: none/true/false, else a Python literal
    (``640``, ``1e2``, ``640,480``: a tuple, ``'a b'``: the string), else the text itself."""
    low = text.lower()
    if low == "none":
        return None
    if low == "true":
        return True
    if low == "false":
        return False
    for kind in (int, float):  # the common case, without the literal parser
        try:
            return kind(text)
        except ValueError:
            pass
    import ast  # a list, a tuple, a quoted string: keeps the common path light

    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def _closest(key: str, keys: list[str]) -> str:
    import difflib  # error path only

    near = difflib.get_close_matches(key, keys, n=1, cutoff=0.6)
    return f" (did you mean '{near[0]}'?)" if near else ""


def check_value(key: str, value: Any) -> Any:
    """``value`` as ultralytics' trainer takes it for ``key`` (its check_cfg: an integral float becomes an
    int), else UsageError naming it. What the trainer refuses only once the job runs is refused here."""
    known = ultralytics_cfg()
    is_num = isinstance(value, (int, float)) and not isinstance(value, bool)
    if value is None:  # ultralytics skips None, except for a typed key that has a default
        typed = {*known["bool_keys"], *known["int_keys"], *known["float_keys"], *known["fraction_keys"]}
        typed |= {*known["str_keys"], "imgsz", "scale"} - {"auto_augment"}  # imgsz=None fails its check_imgsz
        if known["defaults"].get(key) is not None and key in typed:
            raise UsageError(f"'{key}=None': {key} must have a value")
        return None
    if key == "resume":
        if not isinstance(value, (bool, str)):
            raise UsageError(f"'resume={value}' must be True or the checkpoint to resume (path/to/last.pt)")
    elif key in known["bool_keys"]:
        if not isinstance(value, bool):
            raise UsageError(f"'{key}={value}' must be True or False")
    elif key in known["int_keys"]:
        if isinstance(value, float) and value.is_integer():  # ultralytics: epochs=1e2 is 100
            value = int(value)
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
    elif key in known["str_keys"] and not isinstance(value, str):
        raise UsageError(f"'{key}={value}' must be a word")
    _check_choice(key, value)
    if key == "imgsz":
        sizes = value if isinstance(value, (list, tuple)) else [value]
        if not sizes or not all(isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= 8192 for s in sizes):
            raise UsageError(f"'imgsz={value}' must be a whole number of pixels up to 8192, or a list of them")
    if key == "batch" and not (value == -1 or (0 < value < 1) or (value >= 1 and float(value).is_integer())):
        raise UsageError(f"'batch={value}' must be a positive whole number, -1 (auto) or a fraction of GPU memory")
    if key == "batch" and value > MAX_BATCH:
        raise UsageError(f"'batch={value}' is absurd (more than {MAX_BATCH})")
    if key == "epochs" and value > 100_000:
        raise UsageError(f"'epochs={value}' is absurd (more than 100000)")
    if key == "time" and (value < 0 or value > MAX_TIME_HOURS):
        raise UsageError(f"'time={value}' must be the hours to train, at most {MAX_TIME_HOURS} (0: no limit)")
    if key == "device":
        _check_device(value)
    return value


MAX_TIME_HOURS = 24 * 366  # Slurm holds no job longer than a year


def _check_choice(key: str, value: Any) -> None:
    """The values ultralytics' trainer takes for its word-valued keys; any other fails the job it starts
    (the optimizer's name in any case, as its build_optimizer reads it)."""
    known = ultralytics_cfg()
    if key == "optimizer":
        if str(value).lower() not in {name.lower() for name in known["optimizers"]}:
            raise UsageError(
                f"'optimizer={value}' is not one of ultralytics' optimizers ({', '.join(known['optimizers'])})"
            )
    elif key == "amp":
        if not isinstance(value, bool) and str(value).lower() not in known["choices"]["amp"]:
            raise UsageError(f"'amp={value}' must be True, False, fp16, bf16 or fp32")
    elif key == "compile":
        if not isinstance(value, (bool, str)):
            raise UsageError(f"'compile={value}' must be True, False or a torch.compile mode")
    elif key == "scale":
        pair = isinstance(value, (list, tuple)) and len(value) == 2
        numbers = value if pair else [value]
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in numbers):
            raise UsageError(f"'scale={value}' must be a number between 0.0 and 1.0, or a (min, max) pair")
        if not pair and not 0.0 <= value <= 1.0:
            raise UsageError(f"'scale={value}' must be a number between 0.0 and 1.0, or a (min, max) pair")
    elif key in known["choices"] and key != "amp" and value not in known["choices"][key]:
        raise UsageError(f"'{key}={value}' must be one of {', '.join(known['choices'][key])}")


def _check_device(value: Any) -> None:
    """A device a cluster's GPU job can train on: GPU indices, or cpu (which the plan refuses for itself)."""
    text = str(value).lower().replace(" ", "")
    if text in ("mps", "mps:0"):
        raise UsageError(
            f"'device={value}' names an Apple GPU, which no cluster node has: drop device= (the job trains on the"
            " GPUs Slurm gives it), or name how many as device=0,1"
        )
    if _device_count(value) is None:
        raise UsageError(f"'device={value}' must name GPU indices such as 0 or 0,1 (the job's own GPUs), or cpu")


def _device_count(value: Any) -> int | None:
    """GPUs a ``device=`` value names, read as ultralytics' parse_device reads it (0: cpu or mps; None: not
    a CUDA device). The job trains on the GPUs Slurm allocates; the value only says how many to ask for."""
    text = str(value).lower()
    for remove in ("cuda:", "none", "(", ")", "[", "]", "'", " "):
        text = text.replace(remove, "")
    if text in ("cpu", "mps", "mps:0", ""):
        return 0
    items = [item for item in ("0" if text == "cuda" else text).split(",") if item]
    if not all((item.isascii() and item.isdigit()) or item == "-1" for item in items) or len(items) > MAX_DEVICES:
        return None
    return len(items)


SPECIAL_HINT = "one of yolo's own commands, not a training run: run it with yolo itself"


def merge_words(words: list[str]) -> list[str]:
    """ultralytics' merge_equals_args: ``epochs = 3``, ``epochs= 3`` and ``epochs =3`` are ``epochs=3``, and
    a bracketed value split at its spaces (``imgsz=[640,`` ``480]``) is one word again."""
    merged: list[str] = []
    current: list[str] = []
    depth = 0
    i = 0
    while i < len(words):
        word = words[i]
        if word == "=" and 0 < i < len(words) - 1 and merged:
            word = f"{merged.pop()}={words[i + 1]}"
            i += 1
        elif word.endswith("=") and i < len(words) - 1 and "=" not in words[i + 1]:
            word += words[i + 1]
            i += 1
        elif word.startswith("=") and i > 0 and merged:
            word = merged.pop() + word
        depth += word.count("[") - word.count("]")
        current.append(word)
        if depth == 0:
            merged.append("".join(current))
            current = []
        i += 1
    if current:
        raise UsageError(f"'{current[0]}' has an unmatched '[' or ']'")
    return merged


MAX_CFG_BYTES = 1 << 20  # ultralytics' default.yaml is 8 kB


def load_cfg(path: str) -> dict[str, Any]:
    """The keys of a ``cfg=`` file (the file ``yolo copy-cfg`` writes), as ultralytics' entrypoint takes
    them: every key but ``cfg``, each one ultralytics knows. Only a regular file is read (a FIFO would
    block the submission); the job reads it again from the same folder."""
    import os
    import stat

    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise UsageError(f"cfg={path} is not a file")
        if st.st_size > MAX_CFG_BYTES:
            raise UsageError(f"cfg={path} is larger than any ultralytics cfg file ({MAX_CFG_BYTES} bytes)")
        with open(path, encoding="utf-8") as f:
            text = f.read(MAX_CFG_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"cfg={path} not found (a relative path is read from the folder you submit in)") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"cfg={path}: {getattr(e, 'strerror', None) or type(e).__name__}") from None
    import yaml  # only with cfg=

    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as e:
        raise UsageError(f"cfg={path} is not readable YAML: {str(e).splitlines()[0] if str(e) else e!r}") from None
    if not isinstance(data, dict):
        raise UsageError(f"cfg={path} is not a mapping of ultralytics keys")
    known = ultralytics_cfg()["defaults"]
    for key in data:
        if not isinstance(key, str) or key not in known:
            raise UsageError(f"cfg={path}: unknown key '{key}'{_closest(str(key), sorted(known))}")
    return {key: value for key, value in data.items() if key != "cfg"}


def parse(words: list[str] | tuple[str, ...]) -> TrainSpec:
    """Parse a ``yolo`` command line as ultralytics' entrypoint does (words and ``task=``/``mode=`` in any
    order, spaces around ``=``, a trailing comma, ``cfg=FILE`` under the command line's keys, the last of
    a repeated key winning, a missing mode meaning train); any problem raises UsageError naming it."""
    known = ultralytics_cfg()
    defaults = known["defaults"]
    words = list(words)
    for word in words:
        if any(ch in word for ch in "\n\r\x00"):
            raise UsageError(f"argument {word!r} contains a control character")
        if len(word) > MAX_VALUE_LEN:
            raise UsageError(f"argument '{word[:40]}...' is longer than {MAX_VALUE_LEN} characters")
    if words and words[0] == "yolo":
        raise UsageError(
            "drop 'yolo': yolo-sbatch takes the words that follow it (yolo-sbatch ... train key=value ...)"
        )
    overrides: dict[str, Any] = {}
    keys = sorted(defaults)
    for word in merge_words(words):
        if word.startswith("-") and word.partition("=")[0].strip().strip("-") not in defaults:
            raise UsageError(
                f"'{word}' is not a training key: yolo-sbatch's own options (yolo-sbatch --help) go before the"
                f" training words (yolo-sbatch {word} ... train key=value ...), and sbatch's others pass as"
                f" --sbatch-arg={word if '=' in word else word + '=VALUE'}"
            )
        word = word.lstrip("-")
        if word.endswith(","):  # ultralytics drops one trailing comma: epochs=3,
            word = word[:-1]
        if "=" in word:
            key, _, text = word.partition("=")
            key, text = key.strip(), text.strip()
            if key not in defaults:
                raise UsageError(f"unknown key '{key}'{_closest(key, keys)}")
            if text == "":
                raise UsageError(f"key '{key}' has no value")
            # ultralytics keeps a run's name and project as typed (name=007 is the folder 007)
            value = text if key in ("name", "project") and text.lower() != "none" else smart_value(text)
            if key == "cfg":
                if value is not None:  # a key the file leaves empty where ultralytics' default is empty too
                    # is that default (the job's model.train would take data=None as given); model: is not
                    cfg = load_cfg(str(value)).items()
                    kept = {k: v for k, v in cfg if v is not None or k == "model" or defaults.get(k) is not None}
                    overrides = {**kept, **overrides}
            else:
                overrides[key] = value
        elif word in known["tasks"]:
            overrides["task"] = word
        elif word in known["modes"]:
            overrides["mode"] = word
        elif isinstance(defaults.get(word), bool):  # ultralytics: a bare bool key is key=True
            overrides[word] = True
        elif word.lower() in known["special"]:
            raise UsageError(f"'{word}' is {SPECIAL_HINT}")
        elif word in defaults:
            raise UsageError(f"'{word}' needs a value: {word}=VALUE")
        else:
            hint = _closest(word, known["modes"] + known["tasks"])
            raise UsageError(f"unexpected argument '{word}'{hint}: use key=value")
    mode = overrides.pop("mode", None) or defaults["mode"]
    task = overrides.pop("task", None)
    if mode not in known["modes"]:
        raise UsageError(f"'mode={mode}' is not one of ultralytics' modes ({', '.join(known['modes'])})")
    if task is not None and task not in known["tasks"]:
        raise UsageError(f"'task={task}' is not one of ultralytics' tasks ({', '.join(known['tasks'])})")
    if mode != "train":
        raise UsageError(f"yolo-sbatch submits training runs: mode '{mode}' is not supported")
    args = {key: check_value(key, value) for key, value in overrides.items()}
    return TrainSpec(task=task, mode=mode, args=args, tokens=tuple(words))
