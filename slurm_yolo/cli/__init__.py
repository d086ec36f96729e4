"""Thin click commands: parse options, call one library function, print."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any, TypeVar

import click

from .. import config as config_mod
from ..errors import SlurmYoloError

F = TypeVar("F", bound=Callable[..., Any])


def library_errors(fn: F) -> F:
    """Turn the library's one-line errors into click's ``Error: ...`` and exit code 1."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SlurmYoloError as e:
            raise click.ClickException(str(e)) from None

    return wrapper  # type: ignore[return-value]


def load_config() -> config_mod.Config:
    try:
        return config_mod.load()
    except SlurmYoloError as e:
        raise click.ClickException(str(e)) from None


def echo_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))
