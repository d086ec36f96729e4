"""Thin click commands: parse options, call one library function, print."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from slurm_yolo.core import config as config_mod
from slurm_yolo.core.errors import SlurmYoloError, escaped

F = TypeVar("F", bound=Callable[..., Any])


def one_line(message: str) -> str:
    """A message quoting user text, kept to one line: control characters shown escaped, as repr() would."""
    return escaped(message)


def library_errors(fn: F) -> F:
    """Turn the library's one-line errors into click's ``Error: ...`` and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SlurmYoloError as e:
            raise click.ClickException(one_line(str(e))) from None

    return wrapper  # type: ignore[return-value]


class _OneLineParse(click.Command):
    """Bad options get the library's form too: one ``Error:`` line (exit 2), without click's usage
    banner above it. A Command itself, so a group that mixes it in is still a Command to the type
    checker (and to click: the MRO puts Group between this and Command)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            e.ctx = None  # show() prints the usage and the --help hint only with a context
            raise


class OneLineErrors(_OneLineParse):
    """A command whose bad options are one ``Error:`` line."""


class OneLineGroup(_OneLineParse, click.Group):
    """A command group whose bad input, in any of its subcommands, is one ``Error:`` line (exit 2):
    the usage error propagates through every group's invoke, so the outermost one strips the banner."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as e:
            e.ctx = None
            raise


def load_config() -> config_mod.Config:
    try:
        return config_mod.load()
    except SlurmYoloError as e:
        raise click.ClickException(str(e)) from None


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))
