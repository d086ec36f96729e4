"""Every command example in README.md and docs/ is one the commands take: the program, each
subcommand, every option and its value, and for ``yolo-sbatch`` the training words, parsed as a run
would parse them (nothing runs: what they do is the other tests' job, and a helper follows the docs
by hand before an issue about them is resolved). A synopsis line (``[ACCOUNT]``, ``KEY``, ``...``)
is checked with its brackets taken off and each placeholder given a value of its kind."""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import click
import pytest
from conftest import REPO, VENV_BIN, Slurm, fund, set_test_prices

from slurm_yolo.cli.admin import main as admin
from slurm_yolo.cli.yolo_sbatch import main as yolo_sbatch
from slurm_yolo.core import spec
from slurm_yolo.core.billing import policy
from slurm_yolo.core.billing.policy import fmt_tokens
from slurm_yolo.core.synthetic import make_dataset
from slurm_yolo.state import calibration

DOCS = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "reference.md")]
PROGRAMS: dict[str, click.Command] = {"yolo-sbatch": yolo_sbatch, "slurm-yolo": admin}
_FORM = re.compile(r"^\[|\]$|^[A-Z][A-Z_]*$|^\.\.\.$")  # [ACCOUNT], [--json], KEY, JOBID, ...: a synopsis
SAMPLE = {
    "ACCOUNT": "vision",
    "JOBID": "42",
    "KEY": "yolo:42:1796000000",
    "PATH": str(REPO),
    "T": "2026-01-01",
    "TASK": "detect",
    "OPTIONS": "",
    "PARTITION": "t4",
    "QOS": "yolo-explore",
    "...": "",
    "key=value": "epochs=1",
}
_SHELL = (">", ">>", "2>", "|", "&&", ";")  # what the shell takes off the command line


def _example_lines() -> Iterator[tuple[str, str]]:
    """(file:line, the line) of each indented example line that runs one of the programs."""
    for path in DOCS:
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            text = line.strip()
            if line.startswith("    ") and text.split(" ")[0] in PROGRAMS:
                yield f"{path.relative_to(REPO)}:{n}", text


def examples() -> Iterator[tuple[str, list[str]]]:
    """(file:line, the words) of each example, cut where the shell would take the rest."""
    for where, text in _example_lines():
        words = shlex.split(text, comments=True)
        cut = next((i for i, w in enumerate(words) if w in _SHELL), len(words))
        yield where, words[:cut]


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


SITE_ONLY = "# on a real site:"  # an example whose comment says so needs what only a site has
FINDERS = (["slurm-yolo", "doctor"], ["slurm-yolo", "ledger", "audit"])  # exit 1 for what they find


def _words_as_the_shell_gives_them(words: list[str], env: dict[str, str]) -> list[str]:
    """``$VAR`` from ``env`` and a glob expanded as bash would (sorted; kept as written when nothing
    matches)."""
    out = []
    for word in words:
        word = re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), ""), word)
        found = sorted(glob.glob(word)) if "*" in word else []
        out.extend(found or [word])
    return out


@contextmanager
def first_day(cluster: Slurm, partition: str) -> Iterator[None]:
    """The partition as on a site's first day (no fit, no runs: whatever other tests left there is
    not the docs' context), and the calibration store put back as it was after (the tests' and the
    demo's predictions use it)."""
    kept = sqlite3.connect(":memory:")
    with calibration.Store(cluster.config()) as store:
        store.conn.backup(kept)
        with store.transaction():
            for table in ("params", "samples", "moves"):
                store.conn.execute(f"DELETE FROM {table} WHERE partition = ?", (partition,))
    try:
        yield
    finally:
        with closing(kept), calibration.Store(cluster.config()) as store:
            kept.backup(store.conn)
            store.publish()


@pytest.mark.cluster
def test_every_example_runs_on_the_bundled_cluster(cluster: Slurm, tmp_path: Path) -> None:
    """Each command example of the README and docs/ (not a synopsis, nor one marked as a real site's),
    run as written, in order, on the bundled 22.05 cluster with its own config: ``yolo-sbatch`` as
    alice (a user of ``vision``) in a folder with the ``ds.yaml`` the examples name, ``slurm-yolo`` as
    root. Each exits 0 with no ``Error:`` line (``doctor`` and ``audit`` exit 1 for what they find,
    never with an error). What the admin examples change on the cluster (a deposit, a quota, prices,
    tiers, k) is put back as the tests need it; the jobs the examples submit are cancelled (the
    README's ``--wait`` one runs to its end)."""
    demo = Path("/var/tmp/slurm-yolo-demo")  # the README's data, as deploy/demo makes it
    if not (demo / "ds" / "data.yaml").exists():
        make_dataset(demo / "ds", 32, 8, 128)
    work = Path("/var/tmp/slurm-yolo-tests") / f"docs-{os.getpid()}"
    make_dataset(work / "ds", 8, 4, 64)
    (work / "ds.yaml").write_text((work / "ds" / "data.yaml").read_text())
    for p in [demo, work, *demo.rglob("*"), *work.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    subprocess.run(["chown", "-R", "alice", str(work)], check=True)
    with cluster.ledger() as lg:
        tiers_before = {(r["cluster"], r["qos"]): r["rate_ppm"] for r in lg.tiers()}
    probes_before = set(Path("/var/tmp").glob("yolo-probe-*"))  # admins.md's probe leaves its folder there
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "SLURM_YOLO_CONFIG": str(cluster.config_path), "LANG": "C.UTF-8"}
    ran, site, submitted = [], [], []
    with first_day(cluster, "t4"):  # admins.md's probe is "a GPU site's first day" on t4
        try:
            for (where, words, form), line in zip(ALL, (text for _, text in _example_lines()), strict=True):
                if form:
                    continue
                if SITE_ONLY in line:
                    site.append(where)
                    continue
                user = "alice" if words[0] == "yolo-sbatch" else "root"
                user_env = env | {"HOME": f"/home/{user}" if user != "root" else "/root", "USER": user}
                argv = _words_as_the_shell_gives_them(words, user_env)
                res = subprocess.run(
                    ["/usr/sbin/runuser", "-u", user, "--", str(VENV_BIN / argv[0]), *argv[1:]],
                    env=user_env,
                    capture_output=True,
                    text=True,
                    cwd=work,
                    timeout=600,
                )
                submitted += [int(m) for m in re.findall(r"^Submitted batch job (\d+)", res.stdout, re.M)]
                if "--wait" not in argv:
                    for job in submitted:
                        cluster.cmd("scancel", str(job), check=False)
                if "--wait" in argv:  # it ends with what the run was charged, as the ledger settled it
                    job = submitted[-1]
                    row = cluster.settled(job)[0]
                    assert (
                        f"job {job}: charged {fmt_tokens(row['charge'])} of budget for" in res.stdout
                        and f", {fmt_tokens(row['refund'])} of its {fmt_tokens(row['hold'])} hold back" in res.stdout
                    ), res.stdout
                allowed = (0, 1) if any(argv[: len(f)] == f for f in FINDERS) else (0,)
                assert res.returncode in allowed and "Error:" not in res.stderr and "Traceback" not in res.stderr, (
                    where,
                    res.stdout,
                    res.stderr,
                )
                ran.append(where)
        finally:
            for left in set(Path("/var/tmp").glob("yolo-probe-*")) - probes_before:
                shutil.rmtree(left, ignore_errors=True)
            for job in submitted:
                cluster.cmd("scancel", str(job), check=False)
            set_test_prices(cluster)
            with cluster.ledger() as lg:
                tiers_after = {(r["cluster"], r["qos"]) for r in lg.tiers()}
            for (on, qos), rate in tiers_before.items():
                cluster.cli("ledger", "tiers", qos, policy.rate_text(rate), *(["--cluster", on] if on else []))
            for on, qos in tiers_after - set(tiers_before):
                cluster.cli("ledger", "tiers", qos, "--remove", *(["--cluster", on] if on else []), check=False)
            fund(cluster, ("vision",), 10**15)  # the README's deposit and quota off again
    assert len(ran) >= 30 and len(site) <= 3, (ran, site)
