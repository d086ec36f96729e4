"""``slurm-yolo stage``: ultralytics' datasets and weights fetched for the offline compute nodes."""

from __future__ import annotations

import contextlib
import sys

import click

from slurm_yolo.cli import echo_json, library_errors, load_config


@click.command()
@click.option(
    "--json", "as_json", is_flag=True, help="Print a JSON list: each name, its path, whether this run fetched it."
)
@click.argument("names", nargs=-1, metavar="DATA|MODEL...")
@library_errors
def stage(names: tuple[str, ...], as_json: bool) -> None:
    """Fetch ultralytics' datasets and weights where the jobs read them (run it on a login node).

    \b
    slurm-yolo stage coco8-seg.yaml mnist160 yolo11n.pt

    Compute nodes have no network (stage.nodes_online false): a job that names one of ultralytics'
    datasets or released weights that are not staged is refused at submit, with this command. It
    fetches them with ultralytics' own download code (from the site's stage.mirror where set) into
    stage.datasets_dir and stage.weights_dir (else your ultralytics settings' folders), readable by
    every user, as you; a name already there is left as it is.
    """
    from slurm_yolo.login import stage as stage_mod  # imports ultralytics: this command alone

    config = load_config()
    with contextlib.redirect_stdout(sys.stderr):  # ultralytics' log and progress bars, beside the outcome below
        done = stage_mod.stage(config, list(names), say=lambda line: click.echo(line, err=True))
    if as_json:
        echo_json([{"name": s.name, "path": str(s.path), "fetched": s.fetched} for s in done])
        return
    for s in done:
        click.echo(f"staged {s.name} in {s.path}" if s.fetched else f"{s.name}: already staged in {s.path}")
