"""The ledger's tables on MariaDB (InnoDB, byte-for-byte names), as of SQLite's schema version, and
what an older database gets on its way there."""

from __future__ import annotations

SCHEMA_VERSION = 10  # the SQLite migrations this schema matches (``schema.MIGRATIONS``)
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS ledger_turn (id INT PRIMARY KEY, n BIGINT NOT NULL DEFAULT 0)""",
    """INSERT IGNORE INTO ledger_turn (id, n) VALUES (1, 0)""",
    """CREATE TABLE IF NOT EXISTS commits (token CHAR(32) PRIMARY KEY, at DOUBLE NOT NULL) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS schema_version (id INT PRIMARY KEY, version INT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS accounts (
    name VARCHAR(190) PRIMARY KEY,
    balance BIGINT NOT NULL DEFAULT 0,
    held BIGINT NOT NULL DEFAULT 0,
    charged BIGINT NOT NULL DEFAULT 0,
    expired BIGINT NOT NULL DEFAULT 0,
    credited BIGINT NOT NULL DEFAULT 0,
    rate_per_day BIGINT NOT NULL DEFAULT 0,
    capacity BIGINT NOT NULL DEFAULT 0,
    refilled_at DOUBLE NOT NULL,
    blocked TINYINT NOT NULL DEFAULT 0
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS movements (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    at DOUBLE NOT NULL,
    account VARCHAR(190) NOT NULL,
    kind VARCHAR(16) NOT NULL CHECK (kind IN ('deposit', 'refill', 'adjustment', 'hold', 'charge', 'refund',
                                              'expiry', 'overrun')),
    amount BIGINT NOT NULL,
    job_key VARCHAR(190),
    user VARCHAR(190),
    actor VARCHAR(190) NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    KEY movements_account (account, at),
    KEY movements_job (job_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS jobs (
    job_key VARCHAR(190) PRIMARY KEY,
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    submit_time BIGINT NOT NULL,
    restart INT NOT NULL,
    account VARCHAR(190) NOT NULL,
    user VARCHAR(190) NOT NULL,
    `partition` VARCHAR(190) NOT NULL,
    qos VARCHAR(190) NOT NULL DEFAULT '',
    gpus DOUBLE NOT NULL,
    price BIGINT NOT NULL,
    rate DOUBLE NOT NULL,
    time_limit BIGINT,
    hold_seconds BIGINT NOT NULL,
    estimate BIGINT,
    hold BIGINT NOT NULL,
    charge BIGINT,
    refund BIGINT,
    state VARCHAR(8) NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'settled')),
    end_state VARCHAR(32),
    elapsed BIGINT,
    held_at DOUBLE NOT NULL,
    settled_at DOUBLE,
    held_by VARCHAR(32) NOT NULL DEFAULT '',
    settled_by VARCHAR(32),
    gpus_num BIGINT NOT NULL DEFAULT 0,
    gpus_den BIGINT NOT NULL DEFAULT 1 CHECK (gpus_den > 0),
    rate_ppm BIGINT NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0),
    KEY jobs_account_state (account, state),
    KEY jobs_job (cluster, job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS tiers (
    cluster VARCHAR(64) NOT NULL DEFAULT '',
    qos VARCHAR(190) NOT NULL,
    rate DOUBLE NOT NULL CHECK (rate > 0),
    rate_ppm BIGINT NOT NULL DEFAULT 1000000 CHECK (rate_ppm > 0),
    PRIMARY KEY (cluster, qos)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS prices (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    cluster VARCHAR(64) NOT NULL DEFAULT '',
    `partition` VARCHAR(190) NOT NULL,
    price BIGINT NOT NULL CHECK (price > 0),
    effective_at DOUBLE NOT NULL,
    set_at DOUBLE NOT NULL,
    actor VARCHAR(190) NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    KEY prices_partition (`partition`, effective_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS incidents (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    at DOUBLE NOT NULL,
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    event VARCHAR(16) NOT NULL,
    error TEXT NOT NULL DEFAULT '',
    resolved_at DOUBLE,
    KEY incidents_open (resolved_at, cluster, job_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS site_limits (
    cluster VARCHAR(64) NOT NULL,
    account VARCHAR(190) NOT NULL,
    grp_tres_run_mins TEXT NOT NULL,
    kept_at DOUBLE NOT NULL,
    PRIMARY KEY (cluster, account)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS admin_comments (
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    text TEXT NOT NULL,
    queued_at DOUBLE NOT NULL,
    written_at DOUBLE,
    attempts INT NOT NULL DEFAULT 0,
    error TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (cluster, job_id),
    KEY admin_comments_unwritten (written_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS inbox (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    cluster VARCHAR(64) NOT NULL,
    job_id BIGINT NOT NULL,
    event VARCHAR(16) NOT NULL,
    facts TEXT NOT NULL,
    received_at DOUBLE NOT NULL,
    due_at DOUBLE NOT NULL,
    attempts INT NOT NULL DEFAULT 0,
    done_at DOUBLE,
    outcome TEXT NOT NULL DEFAULT '',
    KEY inbox_due (done_at, due_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS commitments (
    cluster VARCHAR(64) NOT NULL,
    account VARCHAR(190) NOT NULL,
    tokens BIGINT NOT NULL CHECK (tokens >= 0),
    counted_at DOUBLE NOT NULL,
    PRIMARY KEY (cluster, account)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    """CREATE TABLE IF NOT EXISTS clusters (
    name VARCHAR(64) PRIMARY KEY,
    joined_at DOUBLE NOT NULL
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin""",
    f"""INSERT IGNORE INTO schema_version (id, version) VALUES (1, {SCHEMA_VERSION})""",
)

# What a database made by an earlier release lacks, by the schema version that brought it (tables
# that are new are made by SCHEMA's CREATE IF NOT EXISTS). Each statement may run twice (two hosts
# upgrading at once): IF NOT EXISTS, and a primary key dropped and made again as it was.
UPGRADES = (
    (
        8,
        (
            "ALTER TABLE prices ADD COLUMN IF NOT EXISTS cluster VARCHAR(64) NOT NULL DEFAULT '' AFTER id",
            "ALTER TABLE tiers ADD COLUMN IF NOT EXISTS cluster VARCHAR(64) NOT NULL DEFAULT '' FIRST,"
            " DROP PRIMARY KEY, ADD PRIMARY KEY (cluster, qos)",
        ),
    ),
    (9, ("INSERT IGNORE INTO clusters (name, joined_at) SELECT DISTINCT cluster, 0 FROM jobs WHERE cluster <> ''",)),
    # names compared as SQLite and Slurm compare them, byte for byte: 'VISION' is not 'vision' here
    (
        10,
        tuple(
            f"ALTER TABLE {t} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
            for t in (
                "accounts",
                "movements",
                "jobs",
                "tiers",
                "prices",
                "incidents",
                "site_limits",
                "admin_comments",
                "inbox",
                "commitments",
                "clusters",
            )
        ),
    ),
)
