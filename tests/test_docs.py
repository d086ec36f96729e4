"""Every command example in README.md and docs/ is one the commands take: the program, each
subcommand, every option and its value, and for ``yolo-sbatch`` the training words, parsed as a run
would parse them (nothing runs: what they do is the other tests' job, and a helper follows the docs
by hand before an issue about them is resolved). A synopsis line (``[ACCOUNT]``, ``KEY``, ``...``)
is checked with its brackets taken off and each placeholder given a value of its kind."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

import click
import pytest
from conftest import REPO

from slurm_yolo import spec
from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch

DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "reference.md")]
PROGRAMS: dict[str, click.Command] = {"yolo-sbatch": yolo_sbatch, "slurm-yolo": admin}
_FORM = re.compile(r"^\[|\]$|^[A-Z][A-Z_]*$|^\.\.\.$")  # [ACCOUNT], [--json], KEY, JOBID, ...: a synopsis
SAMPLE = {"ACCOUNT": "vision", "JOBID": "42", "KEY": "yolo:42:1796000000", "PATH": str(REPO), "T": "2026-01-01",
          "TASK": "detect", "OPTIONS": "", "...": "", "key=value": "epochs=1"}  # fmt: skip
_SHELL = (">", ">>", "2>", "|", "&&", ";")  # what the shell takes off the command line


def examples() -> Iterator[tuple[str, list[str]]]:
    """(file:line, the words) of each indented example line that runs one of the programs."""
    for path in DOCS:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            text = line.strip()
            if line.startswith("    ") and text.split(" ")[0] in PROGRAMS:
                words = shlex.split(text, comments=True)
                cut = next((i for i, w in enumerate(words) if w in _SHELL), len(words))
                yield f"{path.relative_to(REPO)}:{n}", words[:cut]


def _parsed(words: list[str]) -> click.Context:
    """The innermost context ``words`` make, as the program would build it before running."""
    cmd = PROGRAMS[words[0]]
    ctx = cmd.make_context(words[0], words[1:])
    while isinstance(cmd, click.Group):
        name, sub, rest = cmd.resolve_command(ctx, [*ctx._protected_args, *ctx.args])
        assert sub is not None and name is not None, words
        cmd = sub
        ctx = cmd.make_context(name, rest, parent=ctx)
    return ctx


def filled(words: list[str]) -> list[str]:
    """A synopsis as an example: brackets off, each placeholder given a value (an unknown one fails)."""
    out = []
    for word in words:
        bare = word.strip("[]")
        if _FORM.search(bare) or bare in SAMPLE:
            assert bare in SAMPLE, f"a placeholder the test has no value for: {bare}"
            bare = SAMPLE[bare]
        if bare:
            out.append(bare)
    return out


ALL = [(where, filled(words), words != filled(words)) for where, words in examples()]


def test_the_docs_have_examples_of_both_programs() -> None:
    assert {words[0] for _, words, _ in ALL} == set(PROGRAMS) and len(ALL) >= 40


@pytest.mark.parametrize(("where", "words", "form"), ALL, ids=[where for where, _, _ in ALL])
def test_each_example_is_one_the_command_takes(where: str, words: list[str], form: bool) -> None:
    ctx = _parsed(words)
    if words[0] == "yolo-sbatch" and not form:  # a form's training words are a form too
        spec.parse(list(ctx.params["words"]))  # the training words: keys and values as a run checks them
