"""The ledger on a real MariaDB: writers racing on their own connections (two controllers, two
clusters), a server killed and restarted in the middle of settlements, the move from SQLite, the
credentials' file, and the published copy users read. (Every operation's own tests run on both
backends in test_ledger.py.)"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import pytest

from slurm_yolo.core import config
from slurm_yolo.core.errors import SlurmYoloError, UsageError
from slurm_yolo.state import ledger
from slurm_yolo.state.ledger import mariadb, transfer

OWNER = "slurm"  # paths.owner: the SlurmUser, whose option file it is


def run(job_id: int, account: str = "acct") -> ledger.Run:
    return ledger.Run(
        "c", job_id, 100, 0, account, "alice", "a100", "normal", Fraction(1, 4), 600, 600, 3000, 1_000_000
    )


def test_writers_racing_on_their_own_connections_move_every_token_once(mariadb_options: Path) -> None:
    """20 threads, each its own connection (as prologs on two controllers would be), hold 10 runs
    twice each and settle them: each run held once, the totals exact."""
    setup = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
    setup.credit("acct", 100_000, "t")
    held: list[bool] = []

    def worker(job: int) -> None:
        lg = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
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


def test_the_credentials_file_must_be_the_slurmusers_alone(mariadb_options: Path) -> None:
    mariadb_options.chmod(0o640)
    with pytest.raises(SlurmYoloError, match=r"must be the SlurmUser's alone: chown slurm .*; chmod 600"):
        mariadb.connect(mariadb_options, OWNER)
    mariadb_options.chmod(0o600)
    shutil.chown(mariadb_options, "root", "root")  # root's: the SlurmUser's hookd could not read it
    with pytest.raises(SlurmYoloError, match="must be the SlurmUser's alone"):
        mariadb.connect(mariadb_options, OWNER)


class Server:
    """A MariaDB server of the test's own (its own data folder, socket and no TCP port), which the
    test may kill outright and start again, as a site's server crashes and comes back."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.socket = folder / "mysqld.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        shutil.chown(folder, "mysql", "mysql")
        subprocess.run(
            [
                "mariadb-install-db",
                "--no-defaults",
                f"--datadir={folder / 'data'}",
                "--user=mysql",
                "--skip-test-db",
                "--auth-root-authentication-method=normal",
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                "/usr/sbin/mariadbd",
                "--no-defaults",
                f"--datadir={self.folder / 'data'}",
                f"--socket={self.socket}",
                "--skip-networking",
                "--user=mysql",
                f"--pid-file={self.folder / 'pid'}",
                "--innodb-flush-log-at-trx-commit=1",
                f"--log-error={self.folder / 'error.log'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while (
            subprocess.run(["mysqladmin", f"--socket={self.socket}", "-uroot", "ping"], capture_output=True).returncode
            != 0
        ):
            assert time.monotonic() < deadline, (self.folder / "error.log").read_text()[-2000:]
            time.sleep(0.1)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def sql(self, statement: str) -> None:
        subprocess.run(["mysql", f"--socket={self.socket}", "-uroot", "-e", statement], check=True, timeout=60)


@pytest.fixture
def server() -> Iterator[Server]:
    if not shutil.which("mariadb-install-db"):
        pytest.skip("no MariaDB server here (deploy/install installs it)")
    folder = Path(tempfile.mkdtemp(dir="/var/tmp"))  # one the server's own user (mysql) can enter
    try:
        s = Server(folder)
        s.start()
        try:
            yield s
        finally:
            s.kill()
    finally:
        shutil.rmtree(folder)


def test_a_server_killed_in_the_middle_of_50_settlements_loses_and_doubles_nothing(
    server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """50 runs held, then settled one by one while the server is killed (SIGKILL: whatever was in
    flight, a COMMIT included) and started again, twice. Every run ends settled once, and the totals
    are what 50 charges of 400 from holds of 1000 make, computed here."""
    server.sql(
        "CREATE DATABASE books; CREATE USER 'ledger'@'localhost' IDENTIFIED BY 'pw';"
        " GRANT ALL ON books.* TO 'ledger'@'localhost'"
    )
    options = tmp_path / "ledger.cnf"
    options.write_text(f"[client]\nuser=ledger\npassword=pw\ndatabase=books\nsocket={server.socket}\n")
    options.chmod(0o600)
    shutil.chown(options, OWNER, OWNER)
    lg = ledger.Ledger(mariadb.connect(options, OWNER))
    lg.credit("acct", 1_000_000, "t")
    for job in range(50):
        lg.hold(run(job), 1000, None, "prolog")
    outcomes: list[object] = []
    retried: list[BaseException] = []
    retryable = mariadb.Connection.retryable

    def counted(self: mariadb.Connection, error: BaseException, started: float) -> bool:
        again = retryable(self, error, started)
        if again:
            retried.append(error)
        return again

    monkeypatch.setattr(mariadb.Connection, "retryable", counted)

    def settle_all() -> None:
        writer = ledger.Ledger(mariadb.connect(options, OWNER))
        for job in range(50):
            outcomes.append(writer.settle(run(job).key, 400, "COMPLETED", 100, "epilog"))
            time.sleep(0.05)

    t = threading.Thread(target=settle_all)
    t.start()
    for settled in (10, 30):  # while settlements go on: the next one meets a dead connection
        deadline = time.monotonic() + 120
        while len(outcomes) < settled and time.monotonic() < deadline:
            time.sleep(0.005)
        server.kill()
        time.sleep(0.5)
        server.start()
    t.join(timeout=300)
    assert not t.is_alive()
    check = ledger.Ledger(mariadb.connect(options, OWNER))
    assert [r["state"] for r in check.conn.execute("SELECT state FROM jobs")] == ["settled"] * 50
    charges = check.conn.execute("SELECT job_key, count(*) FROM movements WHERE kind = 'charge' GROUP BY job_key")
    assert sorted(n for _, n in charges) == [1] * 50
    a = check.account("acct")
    assert a is not None and (a["balance"], a["held"], a["charged"]) == (1_000_000 - 50 * 400, 0, 50 * 400)
    assert check.check() == []
    assert all(o is not None for o in outcomes)  # each settle call saw its own run settled by itself
    assert retried  # the kills did land in the middle of transactions


def test_the_books_move_from_sqlite_checked_and_the_old_file_is_written_no_more(
    mariadb_options: Path, home: Path
) -> None:
    cfg = config.load()
    with ledger.writer(cfg) as lg:
        lg.credit("acct", 10_000, "t")
        lg.credit("other", 500, "t")
        lg.hold(run(1), 1000, 900, "prolog")
        lg.hold(run(2), 1000, None, "prolog")
        lg.settle(run(2).key, 250, "COMPLETED", 60, "epilog")
        lg.set_tier("yolo-prod", "0.8")
        lg.set_price("a100", 3000, 0.0, "admin")
    done = transfer.to_mariadb(cfg, mariadb_options)
    assert (done.accounts, done.rows["movements"], done.rows["jobs"]) == (
        2,
        6,
        2,
    )  # 2 deposits, 2 holds, a charge and its refund
    with pytest.raises(SlurmYoloError, match="moved to MariaDB"), ledger.writer(cfg) as lg:
        lg.credit("acct", 1, "t")
    with pytest.raises(SlurmYoloError, match="moved to MariaDB"):
        transfer.to_mariadb(cfg, mariadb_options)
    with pytest.raises(SlurmYoloError, match="moved to MariaDB"):  # root never reads the retired books
        ledger.reader(cfg)
    (home / "config.toml").write_text(f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{mariadb_options}"\n')
    cfg = config.load()
    with ledger.writer(cfg) as lg:
        a = lg.account("acct")
        assert a is not None and (a["balance"], a["held"], a["charged"]) == (10_000 - 1000 - 250, 1000, 250)
        assert lg.tier_rate("yolo-prod") == 800_000 and lg.price_at("a100", 2e9, 1) == 3000
        s = lg.settle(run(1).key, 600, "COMPLETED", 60, "epilog")  # the open hold settles on the new books
        assert s is not None and (s.charge, s.refund, s.balance) == (600, 400, 10_000 - 250 - 600)
        assert lg.check() == []


def test_a_move_into_books_that_are_not_empty_is_refused(mariadb_options: Path, home: Path) -> None:
    (home / "config.toml").write_text(f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{mariadb_options}"\n')
    with ledger.writer(config.load()) as lg:
        lg.credit("acct", 5, "t")
    (home / "config.toml").unlink()
    with ledger.writer(config.load()) as lg:
        lg.credit("acct", 10, "t")
    with pytest.raises(UsageError, match="has accounts already: the move takes only a new, empty database"):
        transfer.to_mariadb(config.load(), mariadb_options)
    with ledger.writer(config.load()) as lg:  # the SQLite books are not marked: the move did not happen
        assert lg.balance("acct") == 10


def test_users_read_a_published_copy_of_the_mariadb_books(
    mariadb_options: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Users never get the database's credentials: what alice reads is a SQLite copy published after
    each write, with the same numbers."""
    home = Path(tempfile.mkdtemp(dir="/var/tmp"))  # a folder alice can reach
    home.chmod(0o755)
    monkeypatch.setenv("SLURM_YOLO_HOME", str(home))
    (home / "config.toml").write_text(f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{mariadb_options}"\n')
    try:
        with ledger.writer(config.load()) as lg:
            lg.credit("acct", 777, "t")
            lg.hold(run(1), 100, None, "prolog")
        assert (home / "ledger.db").stat().st_mode & 0o777 == 0o644
        code = "from slurm_yolo.core import config; from slurm_yolo.state import ledger; lg = ledger.reader(config.load()); print(lg.balance('acct'), len(lg.runs(1)))"
        res = subprocess.run(
            ["/usr/sbin/runuser", "-u", "alice", "--", sys.executable, "-c", code],
            capture_output=True,
            text=True,
            env={**os.environ, "SLURM_YOLO_HOME": str(home)},
            cwd="/tmp",
            timeout=60,
        )
        assert res.stdout.split() == ["677", "1"], res.stderr
    finally:
        shutil.rmtree(home)


@pytest.mark.parametrize("kept", [True, False])
def test_a_commit_whose_answer_is_lost_is_looked_up_not_guessed(mariadb_options: Path, kept: bool) -> None:
    """The connection drops as COMMIT is sent: after the server kept the transaction (``kept``) or
    before. The ledger finds its commit marker, or runs the transaction again: one charge either way."""
    import pymysql

    lg = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
    lg.credit("acct", 10_000, "t")
    lg.hold(run(1), 1000, None, "prolog")
    raw = lg.conn._conn  # type: ignore[attr-defined]  # the PyMySQL connection under the ledger's
    real = raw.commit

    def lost_answer() -> None:
        if kept:
            real()
        raw.close()  # without COMMIT, the server rolls the transaction back
        raise pymysql.err.OperationalError(2013, "Lost connection to server during query")

    raw.commit = lost_answer
    s = lg.settle(run(1).key, 400, "COMPLETED", 60, "epilog")
    assert s is not None and (s.charge, s.refund, s.balance) == (400, 600, 10_000 - 400)
    assert lg.conn._conn is not raw  # type: ignore[attr-defined]  # it reconnected
    charges = lg.conn.execute("SELECT count(*) FROM movements WHERE kind = 'charge'").fetchone()[0]
    assert charges == 1 and lg.check() == []


def test_the_move_is_one_command_and_a_bad_one_changes_nothing(mariadb_options: Path, home: Path) -> None:
    from click.testing import CliRunner

    from slurm_yolo.cli.admin import main as admin

    with ledger.writer(config.load()) as lg:
        lg.credit("acct", 1234, "t")
    loose = mariadb_options.with_name("loose.cnf")
    loose.write_text(mariadb_options.read_text())
    loose.chmod(0o644)
    shutil.chown(loose, OWNER, OWNER)
    for options, why in ((home / "none.cnf", "No such file"), (loose, "must be the SlurmUser's alone")):
        res = CliRunner().invoke(admin, ["ledger", "migrate", "--to", "mariadb", "--options", str(options)])
        assert res.exit_code == 1 and res.output.startswith("Error: ") and why in res.output, res.output
        assert len(res.output.strip().splitlines()) == 1
    with ledger.writer(config.load()) as lg:  # not moved
        lg.credit("acct", 1, "t")
    res = CliRunner().invoke(admin, ["ledger", "migrate", "--to", "mariadb", "--options", str(mariadb_options)])
    assert res.exit_code == 0, res.output
    assert "accounts 1, movements 2" in res.output
    assert res.output.splitlines()[-2:] == ['backend = "mariadb"', f'mariadb_options = "{mariadb_options}"']
    (home / "config.toml").write_text(f'[ledger]\nbackend = "mariadb"\nmariadb_options = "{mariadb_options}"\n')
    res = CliRunner().invoke(admin, ["ledger", "balance", "acct", "--json"])
    assert res.exit_code == 0 and '"balance": 1235' in res.output, res.output


def test_a_database_of_an_earlier_release_is_upgraded_in_place(mariadb_options: Path) -> None:
    """A ledger database made before prices and tiers could be one cluster's (schema 6) gets the
    cluster columns on its first connection, its rows kept as every cluster's."""
    lg = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
    for statement in (
        "ALTER TABLE prices DROP COLUMN cluster",
        "ALTER TABLE tiers DROP PRIMARY KEY, DROP COLUMN cluster, ADD PRIMARY KEY (qos)",
        "DROP TABLE commitments",
        "UPDATE schema_version SET version = 6",
    ):
        lg.conn.execute(statement)
    lg.conn.execute(
        "INSERT INTO prices (`partition`, price, effective_at, set_at, actor) VALUES ('a100', 3000, 0, 0, 'old')"
    )
    lg.conn.execute("INSERT INTO tiers (qos, rate, rate_ppm) VALUES ('prod', 0.8, 800000)")
    lg.close()
    mariadb._ready.clear()  # a new process: the schema is looked at again
    lg = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
    try:
        assert lg.conn.execute("SELECT version FROM schema_version").fetchone()[0] == mariadb.SCHEMA_VERSION
        assert lg.price_at("a100", time.time(), 7, "east") == 3000 and lg.tier_rate("prod", "east") == 800_000
        lg.set_tier("prod", "0.5", cluster="east")
        lg.set_price("a100", 10, 0.0, "admin", cluster="east")
        assert lg.price_at("a100", time.time() + 1, 7, "east") == 10 and lg.tier_rate("prod", "east") == 500_000
        assert lg.price_at("a100", time.time() + 1, 7, "west") == 3000 and lg.tier_rate("prod", "west") == 800_000
        assert lg.admit("east", "nobody", 1, {}).ok is False  # the commitments table is back
    finally:
        lg.close()


def test_a_check_reads_one_moment_while_another_host_writes(mariadb_options: Path, tmp_path: Path) -> None:
    """A reader of one moment (``Ledger.check``, the published copy) sees nothing another connection
    commits meanwhile: the sessions read committed rows, and a snapshot under that level lasted one
    statement (CI caught ``check`` finding a hold in the account's row but not in its movements)."""
    reader = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
    writer = ledger.Ledger(mariadb.connect(mariadb_options, OWNER))
    try:
        writer.credit("acct", 1000, "t")
        with reader.conn.consistent():
            before = reader.account("acct")["balance"]
            writer.hold(run(91), 300, None, "prolog")
            assert reader.account("acct")["balance"] == before  # still the moment it began
            assert reader._check() == []
        assert reader.account("acct")["balance"] == before - 300
        reader.conn.snapshot(tmp_path / "copy.db")  # the published copy: also one moment
        assert reader.check() == []
    finally:
        reader.close()
        writer.close()
