"""The ledger's schema: append-only movements, derived balances kept in the same transaction."""

MIGRATIONS = (
    """
CREATE TABLE accounts (
    name TEXT PRIMARY KEY,
    balance INTEGER NOT NULL DEFAULT 0,
    held INTEGER NOT NULL DEFAULT 0,
    charged INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0,
    credited INTEGER NOT NULL DEFAULT 0,
    rate_per_day INTEGER NOT NULL DEFAULT 0,
    capacity INTEGER NOT NULL DEFAULT 0,
    refilled_at REAL NOT NULL,
    blocked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE movements (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    account TEXT NOT NULL REFERENCES accounts (name),
    kind TEXT NOT NULL CHECK (kind IN ('deposit', 'refill', 'adjustment', 'hold', 'charge', 'refund', 'expiry')),
    amount INTEGER NOT NULL,
    job_key TEXT,
    user TEXT,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX movements_account ON movements (account, at);
CREATE INDEX movements_job ON movements (job_key);
CREATE TABLE jobs (
    job_key TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    submit_time TEXT NOT NULL,
    restart INTEGER NOT NULL,
    account TEXT NOT NULL,
    user TEXT NOT NULL,
    partition TEXT NOT NULL,
    qos TEXT NOT NULL DEFAULT '',
    gpus REAL NOT NULL,
    k REAL NOT NULL,
    time_limit INTEGER NOT NULL,
    estimate INTEGER,
    hold INTEGER NOT NULL,
    charge INTEGER,
    refund INTEGER,
    state TEXT NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'settled')),
    end_state TEXT,
    elapsed INTEGER,
    held_at REAL NOT NULL,
    settled_at REAL
);
CREATE INDEX jobs_account_state ON jobs (account, state);
CREATE TABLE tiers (
    qos TEXT PRIMARY KEY,
    rate REAL NOT NULL CHECK (rate > 0)
)
""",  # 2: billing from prices an admin sets (versioned), stored on each run with its tier rate; runs
    # keyed by Slurm's numbers; a run may pay past its hold ("overrun"); hook failures as incidents.
    # Version 1 keyed runs by submit time as local-time text: such keys become epoch seconds (read in
    # this host's time zone, as Slurm printed them), so reconcile finds the runs held before.
    """
CREATE TABLE prices (
    id INTEGER PRIMARY KEY,
    partition TEXT NOT NULL,
    price INTEGER NOT NULL CHECK (price > 0),
    effective_at REAL NOT NULL,
    set_at REAL NOT NULL,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE INDEX prices_partition ON prices (partition, effective_at);
CREATE TABLE incidents (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    cluster TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    error TEXT NOT NULL,
    resolved_at REAL
);
CREATE INDEX incidents_open ON incidents (resolved_at, cluster, job_id);
CREATE TABLE movements2 (
    id INTEGER PRIMARY KEY,
    at REAL NOT NULL,
    account TEXT NOT NULL REFERENCES accounts (name),
    kind TEXT NOT NULL CHECK (kind IN ('deposit', 'refill', 'adjustment', 'hold', 'charge', 'refund', 'expiry', 'overrun')),
    amount INTEGER NOT NULL,
    job_key TEXT,
    user TEXT,
    actor TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
CREATE TEMP TABLE keymap AS SELECT job_key AS old,
    CASE WHEN unique_text THEN cluster || ':' || job_id || ':' || CAST(strftime('%s', submit_time, 'utc') AS INTEGER)
         ELSE job_key END AS new,
    CASE WHEN unique_text THEN CAST(strftime('%s', submit_time, 'utc') AS INTEGER) ELSE submit_time END AS submit
    FROM (SELECT *, submit_time GLOB '[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T*' AND (SELECT count(*) FROM jobs j2
          WHERE j2.cluster = jobs.cluster AND j2.job_id = jobs.job_id AND j2.submit_time = jobs.submit_time) = 1
          AS unique_text FROM jobs);
INSERT INTO movements2 SELECT id, at, account, kind, amount,
    coalesce((SELECT new FROM keymap WHERE old = movements.job_key), job_key), user, actor, reason FROM movements;
DROP TABLE movements;
ALTER TABLE movements2 RENAME TO movements;
CREATE INDEX movements_account ON movements (account, at);
CREATE INDEX movements_job ON movements (job_key);
CREATE TABLE jobs2 (
    job_key TEXT PRIMARY KEY,
    cluster TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    submit_time NOT NULL,
    restart INTEGER NOT NULL,
    account TEXT NOT NULL,
    user TEXT NOT NULL,
    partition TEXT NOT NULL,
    qos TEXT NOT NULL DEFAULT '',
    gpus REAL NOT NULL,
    price INTEGER NOT NULL,
    rate REAL NOT NULL,
    time_limit INTEGER,
    hold_seconds INTEGER NOT NULL,
    estimate INTEGER,
    hold INTEGER NOT NULL,
    charge INTEGER,
    refund INTEGER,
    state TEXT NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'settled')),
    end_state TEXT,
    elapsed INTEGER,
    held_at REAL NOT NULL,
    settled_at REAL,
    held_by TEXT NOT NULL DEFAULT '',
    settled_by TEXT
);
INSERT INTO jobs2 SELECT keymap.new, cluster, job_id, keymap.submit, restart, account, user, partition, qos, gpus,
    CAST(round(1000000.0 / k) AS INTEGER), coalesce((SELECT rate FROM tiers WHERE tiers.qos = jobs.qos), 1.0),
    time_limit, time_limit, estimate, hold, charge, refund, state, end_state, elapsed, held_at, settled_at, 'prolog',
    CASE WHEN state = 'settled' THEN 'epilog' END FROM jobs JOIN keymap ON keymap.old = jobs.job_key;
DROP TABLE jobs;
DROP TABLE keymap;
ALTER TABLE jobs2 RENAME TO jobs;
CREATE INDEX jobs_account_state ON jobs (account, state);
CREATE INDEX jobs_job ON jobs (cluster, job_id)
""",
    # 3: what the site had set in an account's GPU run-minute limits on a cluster (GrpTRESRunMins, as
    # sacctmgr prints it; '': none) while a ledger block replaces them with 0, so lifting the block
    # restores them. A row exists only while the account is blocked there (or its lifting is pending).
    # Accounts blocked now were blocked by an earlier release, which set 0 and kept nothing: they get
    # a row saying "none" on each cluster the ledger has runs of, so that funding them lifts the block.
    """
CREATE TABLE site_limits (
    cluster TEXT NOT NULL,
    account TEXT NOT NULL,
    grp_tres_run_mins TEXT NOT NULL,
    kept_at REAL NOT NULL,
    PRIMARY KEY (cluster, account)
);
INSERT INTO site_limits (cluster, account, grp_tres_run_mins, kept_at)
    SELECT clusters.cluster, accounts.name, '', CAST(strftime('%s', 'now') AS REAL)
    FROM accounts CROSS JOIN (SELECT DISTINCT cluster FROM jobs) AS clusters WHERE accounts.blocked = 1
""",
    # 4: each job's AdminComment, queued in the settlement's transaction, until sacctmgr takes it
    """
CREATE TABLE admin_comments (
    cluster TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    text TEXT NOT NULL,
    queued_at REAL NOT NULL,
    written_at REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, job_id)
);
CREATE INDEX admin_comments_unwritten ON admin_comments (written_at)
""",
    # 5: the settler's durable inbox: each epilog event hookd acknowledged, until the settler has
    # settled its runs from sacct (``settler``); a kill or an OOM loses none of them
    """
CREATE TABLE inbox (
    id INTEGER PRIMARY KEY,
    cluster TEXT NOT NULL,
    job_id INTEGER NOT NULL,
    event TEXT NOT NULL,
    facts TEXT NOT NULL DEFAULT '{}',
    received_at REAL NOT NULL,
    due_at REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    done_at REAL,
    outcome TEXT NOT NULL DEFAULT ''
);
CREATE INDEX inbox_due ON inbox (done_at, due_at)
""",
    # 6: billing in whole numbers: a run's GPU share as gpus_num / gpus_den and tier rates in parts per
    # million (rate_ppm), which ``policy.tokens`` multiplies exactly. The REAL gpus and rate stay, as
    # written before, for readers that show them; nothing bills from them. Old rows get the smallest
    # denominator up to 1000 that gives their share back (shards per GPU: 0.333333 -> 1/3), and their
    # rate rounded to the millionth (every rate an admin could set had at most 6 decimals that mattered).
    """
ALTER TABLE jobs ADD COLUMN gpus_num INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN gpus_den INTEGER NOT NULL DEFAULT 1 CHECK (gpus_den > 0);
ALTER TABLE jobs ADD COLUMN rate_ppm INTEGER NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0);
UPDATE jobs SET gpus_den = coalesce((
    WITH RECURSIVE d(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM d WHERE n < 1000)
    SELECT min(n) FROM d WHERE abs(jobs.gpus * n - round(jobs.gpus * n)) < 1e-9 * n), 1000000);
UPDATE jobs SET gpus_num = CAST(round(gpus * gpus_den) AS INTEGER),
    rate_ppm = max(1, CAST(round(rate * 1000000) AS INTEGER));
ALTER TABLE tiers ADD COLUMN rate_ppm INTEGER NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0);
UPDATE tiers SET rate_ppm = max(1, CAST(round(rate * 1000000) AS INTEGER))
""",
    # 7: what each cluster's pending GPU jobs may still hold, per account, as its job_submit.lua last
    # counted it (``Ledger.admit``): on a ledger several clusters share, admission on one sees the
    # others' pending worst cases, and racing submissions on all of them take their turn here
    """
CREATE TABLE commitments (
    cluster TEXT NOT NULL,
    account TEXT NOT NULL,
    tokens INTEGER NOT NULL CHECK (tokens >= 0),
    counted_at REAL NOT NULL,
    PRIMARY KEY (cluster, account)
)
""",
    # 8: prices and tiers of one cluster of a shared ledger (cluster ''; every cluster without its own)
    """
ALTER TABLE prices ADD COLUMN cluster TEXT NOT NULL DEFAULT '';
CREATE TABLE tiers2 (
    cluster TEXT NOT NULL DEFAULT '',
    qos TEXT NOT NULL,
    rate REAL NOT NULL CHECK (rate > 0),
    rate_ppm INTEGER NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0),
    PRIMARY KEY (cluster, qos)
);
INSERT INTO tiers2 (cluster, qos, rate, rate_ppm) SELECT '', qos, rate, rate_ppm FROM tiers;
DROP TABLE tiers;
ALTER TABLE tiers2 RENAME TO tiers
""",
    # 9: when each cluster's runs began to be kept here. Reconcile and audit bill from sacct only runs
    # that started since (a cluster that joins a shared ledger brings no history: its earlier runs were
    # billed by its own books). Clusters with runs here already have their whole history: since 0.
    """
CREATE TABLE clusters (
    name TEXT PRIMARY KEY,
    joined_at REAL NOT NULL
);
INSERT INTO clusters (name, joined_at) SELECT DISTINCT cluster, 0 FROM jobs WHERE cluster <> ''
""",
)
