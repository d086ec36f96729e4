"""The ledger's operations on a real MariaDB (the bundled 22.05 cluster's server, the one slurmdbd
uses), in a database and user of the test's own, dropped afterwards: the same invariants as on
SQLite, and writers racing on separate connections hold a run once and move every token exactly."""

from __future__ import annotations

import secrets
import subprocess
import threading
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from slurm_yolo import ledger
from slurm_yolo.ledger import mariadb

MARKER = Path("/var/lib/slurm-yolo-cluster/clusters/22.05.json")  # the bundled cluster's MariaDB only


def _sql(statement: str) -> None:
    subprocess.run(["mysql", "--protocol=socket", "-e", statement], check=True, capture_output=True, timeout=60)


@pytest.fixture
def option_file(tmp_path: Path) -> Iterator[str]:
    if not MARKER.exists():
        pytest.skip("the bundled cluster's MariaDB is not up (deploy/minicluster up)")
    name, password = f"yolo_test_{secrets.token_hex(4)}", secrets.token_hex(16)
    _sql(f"CREATE DATABASE {name}; CREATE USER '{name}'@'localhost' IDENTIFIED BY '{password}';"
         f" GRANT ALL ON {name}.* TO '{name}'@'localhost'")  # fmt: skip
    path = tmp_path / "ledger.cnf"
    path.write_text(f"[client]\nuser={name}\npassword={password}\ndatabase={name}\nsocket=/run/mysqld/mysqld.sock\n")
    path.chmod(0o600)
    try:
        yield str(path)
    finally:
        _sql(f"DROP DATABASE {name}; DROP USER '{name}'@'localhost'")


def run(job_id: int, account: str = "acct") -> ledger.Run:
    return ledger.Run("c", job_id, 100, 0, account, "alice", "a100", "normal", Fraction(1, 4), 600, 600, 3000,
                      1_000_000)  # fmt: skip


def test_hold_settle_once_and_the_books_balance(option_file: str) -> None:
    lg = ledger.Ledger(mariadb.connect(option_file))  # type: ignore[arg-type]
    lg.credit("acct", 1000, "t")
    assert lg.hold(run(1), 300, 250, "prolog") == (True, None)
    assert lg.hold(run(1), 300, 250, "prolog") == (False, None)  # a repeated prolog
    s = lg.settle(run(1).key, 120, "COMPLETED", 60, "epilog")
    assert s is not None and (s.charge, s.refund, s.balance) == (120, 180, 880)
    assert lg.settle(run(1).key, 120, "COMPLETED", 60, "epilog") is None  # a repeated epilog
    lg.set_tier("yolo-prod", "0.8")
    lg.set_tier("yolo-prod", "0.9")  # an upsert
    assert lg.tier_rate("yolo-prod") == 900_000
    lg.set_price("a100", 7, 0.0, "admin")
    assert lg.price_at("a100", 2e9, 1) == 7
    a = lg.account("acct")
    assert a is not None and (a["balance"], a["held"], a["charged"], a["credited"]) == (880, 0, 120, 1000)
    assert lg.check() == []


def test_writers_racing_on_their_own_connections_move_every_token_once(option_file: str) -> None:
    """20 threads, each its own connection (as prologs on two controllers would be), hold 10 runs
    twice each and settle them: each run held once, the totals exact."""
    setup = ledger.Ledger(mariadb.connect(option_file))  # type: ignore[arg-type]
    setup.credit("acct", 100_000, "t")
    held: list[bool] = []

    def worker(job: int) -> None:
        lg = ledger.Ledger(mariadb.connect(option_file))  # type: ignore[arg-type]
        try:
            got, _ = lg.hold(run(job), 1000, None, "prolog")
            held.append(got)
            lg.settle(run(job).key, 400, "COMPLETED", 100, "epilog")
        finally:
            lg.close()

    threads = [threading.Thread(target=worker, args=(1 + i % 10,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(held) == [False] * 10 + [True] * 10
    a = setup.account("acct")
    assert a is not None and (a["balance"], a["held"], a["charged"]) == (100_000 - 10 * 400, 0, 10 * 400)
    assert setup.check() == []
