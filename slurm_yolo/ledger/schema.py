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
""",
)
