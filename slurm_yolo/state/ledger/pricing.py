"""Prices per partition (with their scheduled changes) and the QOS tiers' rates, per cluster or for all."""

from __future__ import annotations

import time
from typing import Any

from slurm_yolo.core.billing import policy
from slurm_yolo.core.errors import UsageError
from slurm_yolo.state.ledger import store
from slurm_yolo.state.ledger.base import LedgerBase


class Pricing(LedgerBase):
    """Prices per partition (with their scheduled changes) and the QOS tiers' rates, per cluster or for all."""

    def set_tier(self, qos: str, rate: str, cluster: str = "") -> int:
        """Charge multiplier for jobs of ``qos`` (e.g. prod 0.8, explore 1.5), read exactly from its
        decimal text (``policy.parse_rate``), on ``cluster`` alone or ('') on every cluster of this
        ledger that has no rate of its own for the QOS; the rate kept, in parts per million."""
        ppm = policy.parse_rate(rate)

        def body() -> Any:
            self.conn.execute(
                "INSERT INTO tiers (cluster, qos, rate, rate_ppm) VALUES (?, ?, ?, ?) ON CONFLICT (cluster, qos) DO UPDATE"
                " SET rate = excluded.rate, rate_ppm = excluded.rate_ppm",
                (cluster, qos, ppm / policy.RATE_SCALE, ppm),
            )

        self._atomic(body)
        return ppm

    def remove_tier(self, qos: str, cluster: str = "") -> bool:
        """Jobs of ``qos`` held from now on pay the price again (or every cluster's rate, when a
        cluster's own is removed); runs already held keep the rate they were held at. Whether there
        was such a tier."""

        def body() -> Any:
            return self.conn.execute("DELETE FROM tiers WHERE cluster = ? AND qos = ?", (cluster, qos)).rowcount > 0

        return bool(self._atomic(body))

    def tiers(self) -> list[store.Row]:
        return self.conn.execute("SELECT cluster, qos, rate_ppm FROM tiers ORDER BY qos, cluster").fetchall()

    def tier_rate(self, qos: str, cluster: str = "") -> int:
        """The tier's rate in parts per million on ``cluster`` (its own, else every cluster's;
        1,000,000: a QOS without a tier pays the price)."""
        row = self.conn.execute(
            "SELECT rate_ppm FROM tiers WHERE qos = ? AND cluster IN (?, '') ORDER BY cluster DESC LIMIT 1",
            (qos, cluster),
        ).fetchone()
        return int(row["rate_ppm"]) if row else policy.RATE_SCALE

    def set_price(
        self, partition: str, price: int, effective_at: float, actor: str, reason: str = "", cluster: str = ""
    ) -> None:
        """From ``effective_at`` on, runs of ``partition`` are held and billed at ``price`` tokens per
        GPU-second, on ``cluster`` alone or ('') on every cluster of this ledger that has no price of
        its own for the partition. Runs already held keep the price they were held at."""
        if not isinstance(price, int) or price <= 0:
            raise UsageError(f"a price must be a positive whole number of tokens per GPU-second (got {price})")
        if not partition or not partition.isprintable():
            raise UsageError("a price needs a plain partition name")
        now = time.time()

        def body() -> Any:
            self.conn.execute(
                "INSERT INTO prices (cluster, `partition`, price, effective_at, set_at, actor, reason)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (cluster, partition, price, max(effective_at, now), now, actor, reason),
            )

        self._atomic(body)

    def price_at(self, partition: str, at: float, default: int, cluster: str = "") -> int:
        """The partition's price at ``at`` on ``cluster``: the newest version in effect then of the
        cluster's own prices, else of every cluster's, else ``default``."""
        row = self.conn.execute(
            "SELECT price FROM prices WHERE `partition` = ? AND cluster IN (?, '') AND effective_at <= ?"
            " ORDER BY cluster DESC, effective_at DESC, id DESC LIMIT 1",
            (partition, cluster, at),
        ).fetchone()
        return int(row["price"]) if row else default

    def has_cluster_prices(self) -> bool:
        """Some cluster of this ledger has prices or tiers of its own (``set_price``, ``set_tier``)."""
        row = self.conn.execute(
            "SELECT EXISTS (SELECT 1 FROM prices WHERE cluster <> '')"
            " OR EXISTS (SELECT 1 FROM tiers WHERE cluster <> '')"
        ).fetchone()
        return bool(row[0])

    def cancel_prices(self, partition: str, cluster: str = "") -> list[store.Row]:
        """Drop the versions of ``partition``'s price (on ``cluster``, or '' every cluster's) that
        have not taken effect yet: a price scheduled by mistake. Versions in effect stay (runs were
        held at them, and the books show when each applied). The versions dropped."""
        now = time.time()
        where = "cluster = ? AND `partition` = ? AND effective_at > ?"

        def body() -> Any:
            rows = self.conn.execute(
                f"SELECT * FROM prices WHERE {where} ORDER BY effective_at, id", (cluster, partition, now)
            ).fetchall()
            self.conn.execute(f"DELETE FROM prices WHERE {where}", (cluster, partition, now))
            return rows

        return list(self._atomic(body))

    def prices(self) -> list[store.Row]:
        return self.conn.execute("SELECT * FROM prices ORDER BY cluster, `partition`, effective_at, id").fetchall()
