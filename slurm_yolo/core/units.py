"""Amounts for people, in k/M/G/T: the one scale that both units share, the work's pixels (``px``,
``core.model.estimate.fmt_pixels``) and the budget's tokens (``Tok``, ``core.billing.policy.fmt_tokens``)."""

from __future__ import annotations


def scaled(n: float, unit: str) -> str:
    """``n`` in k/M/G/T of ``unit``: a small amount never reads 0.0, and a tenth of a million keeps two
    figures (150 k is not "0.1 M")."""
    for prefix, scale, digits in (("T", 1e12, 2), ("G", 1e9, 2), ("M", 1e6, 1), ("k", 1e3, 1)):
        if abs(n) >= scale:
            return f"{n / scale:.{digits}f} {prefix}{unit}"
        if prefix == "M" and abs(n) >= 1e5:
            return f"{n / scale:.2f} {prefix}{unit}"
    return f"{n:.0f} {unit}"
