"""One billing formula, two languages: tests/vectors/billing.json holds the cases, and both the
Python policy (core/billing) and job_submit.lua's policy.lua (joined with bigint.lua, as installed)
must give each case's answer (gres_units, how the script reads Slurm's TRES strings, is the Lua's
alone: the prolog reads Slurm's parsed TRES instead)."""

from __future__ import annotations

import json
import shutil
import subprocess
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from conftest import IN_CI

from slurm_yolo.core import durations
from slurm_yolo.core.billing import bucket, policy
from slurm_yolo.state import availability

VECTORS = json.loads((Path(__file__).parents[1] / "vectors" / "billing.json").read_text())
LUA = shutil.which("lua5.1")


def test_python_gives_every_answer() -> None:
    for c in VECTORS["tokens"]:
        assert str(policy.tokens(c["seconds"], Fraction(c["num"], c["den"]), c["price"], c["rate_ppm"])) == c["want"]
    for c in VECTORS["share"]:
        assert policy.share(c["whole"], c["shards"], c["shards_per_gpu"]) == Fraction(c["num"], c["den"])
    for c in VECTORS["rate_text"]:
        assert policy.rate_text(c["rate_ppm"]) == c["want"]
    for c in VECTORS["hold_seconds"]:
        if c["default_time"] is None and c["max_time"] is None:
            limit = None if c["minutes"] is None else c["minutes"] * 60
            assert policy.hold_seconds(limit, c["unlimited"]) == c["want"], c
    for c in VECTORS["seconds_to_cover"]:
        got = bucket.seconds_to_cover(c["total"], c["balance"], c["capacity"], c["rate_per_day"])
        assert (None if got is None else int(got)) == c["want"], c
    for c in VECTORS["exempt"]:
        assert policy.exempt(c["partition"], c["account"], c["partitions"], c["accounts"]) == c["want"], c


def _lua(value: Any) -> str:
    """A JSON value as a Lua literal (the vectors hold numbers, strings, null and flat objects)."""
    if value is None:
        return "nil"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_lua(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "{" + ", ".join(_lua(v) for v in value) + "}"
    return json.dumps(value)


HARNESS = """
local V = VECTORS
local out = {}
for _, c in ipairs(V.tokens) do
  out[#out + 1] = text(tokens(c.seconds, {num = big(c.num), den = c.den}, big(c.price), big(c.rate_ppm)))
end
for _, c in ipairs(V.share) do
  local u = share({shards = {p = c.shards_per_gpu}}, "p", big(c.whole), big(c.shards))
  out[#out + 1] = text(u.num) .. " " .. u.den
end
for _, c in ipairs(V.rate_text) do out[#out + 1] = rate_text(big(c.rate_ppm)) end
for _, c in ipairs(V.seconds_to_cover) do
  local state = {quota = {a = {capacity = big(c.capacity), per_day = c.rate_per_day}}, credit_wait = 2^52}
  out[#out + 1] = tostring(credit_wait(state, "a", big(c.total), big(c.balance)))
end
for _, c in ipairs(V.gres_units) do
  local g, s = gres_units(c.spec)
  out[#out + 1] = text(g) .. " " .. text(s)
end
for _, c in ipairs(V.hold_seconds) do
  local part = {default_time = c.default_time or NO_VAL, max_time = c.max_time or INFINITE}
  out[#out + 1] = tostring(seconds_of({unlimited = c.unlimited}, c.minutes or NO_VAL, part))
end
for _, c in ipairs(V.price_in_effect) do
  local now, state = os.time(), {price = {p = {}}, own_price = {p = {}}, default_price = big(c.default)}
  for _, v in ipairs(c.every) do table.insert(state.price.p, {now + v[1], big(v[2])}) end
  for _, v in ipairs(c.own) do table.insert(state.own_price.p, {now + v[1], big(v[2])}) end
  out[#out + 1] = text(price_of(state, "p"))
end
for _, c in ipairs(V.exempt) do  -- as read_state keeps the published lists
  local state = {exempt_partition = {}, exempt_account = {}}
  for _, name in ipairs(c.partitions) do state.exempt_partition[name] = true end
  for _, name in ipairs(c.accounts) do state.exempt_account[string.lower(name)] = true end
  out[#out + 1] = tostring(exempt(state, c.partition, c.account))
end
for _, line in ipairs(out) do print(line) end
"""


@pytest.mark.skipif(LUA is None and not IN_CI, reason="no lua5.1 (apt-get install lua5.1, as deploy/install does)")
def test_lua_gives_every_answer(tmp_path: Path) -> None:
    """policy.lua's functions, in the chunk they are installed in (their locals), on the same cases."""
    chunk = "\n".join(availability.lua_source(name) for name in ("bigint.lua", "policy.lua"))
    chunk = chunk.replace("@MAX_LIMIT_SECONDS@", str(durations.YEAR)).replace(
        "@COVER_MARGIN_SECONDS@", str(bucket.COVER_MARGIN_SECONDS)
    )
    script = tmp_path / "vectors.lua"
    script.write_text(f"VECTORS = {_lua(VECTORS)}\n{chunk}\n{HARNESS}")
    got = subprocess.run([str(LUA), str(script)], capture_output=True, text=True, timeout=60, check=True)
    want = [c["want"] for c in VECTORS["tokens"]]
    want += [c["want"] for c in VECTORS["rate_text"]]
    want += ["nil" if c["want"] in (None, 0) else str(c["want"]) for c in VECTORS["seconds_to_cover"]]
    want += [f"{c['gpus']} {c['shards']}" for c in VECTORS["gres_units"]]
    want += [str(c["want"]) for c in VECTORS["hold_seconds"]]
    want += [c["want"] for c in VECTORS["price_in_effect"]]
    want += [str(c["want"] != "").lower() for c in VECTORS["exempt"]]
    lines = got.stdout.splitlines()
    n = len(VECTORS["tokens"])
    shares = lines[n : n + len(VECTORS["share"])]  # Lua keeps shards over shards per GPU unreduced
    assert [Fraction(*map(int, line.split())) for line in shares] == [
        Fraction(c["num"], c["den"]) for c in VECTORS["share"]
    ]
    assert lines[:n] + lines[n + len(shares) :] == want
