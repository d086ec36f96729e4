-- Whole numbers of any size for job_submit.lua (slurmctld 22.05 embeds Lua 5.1, whose numbers are
-- doubles, exact only below 2^53): what money is counted in, exactly as Python's ints count it.
-- Joined into the installed script ahead of policy.lua (state/availability.py: script).

-- Whole numbers past 2^53: little-endian limbs of 10^7 (a limb product, 10^14, stays exact in a
-- double), no leading zero limb ({} is 0), and neg = true for a negative one.
local BASE = 10000000
local unpack = unpack or table.unpack

local function divmod(x, d)  -- x, d whole and x < 2^53: floor division that never rounds up
  local r = x % d
  return (x - r) / d, r
end

local function trim(a)
  while #a > 0 and a[#a] == 0 do a[#a] = nil end
  if #a == 0 then a.neg = nil end
  return a
end

-- From a whole number below 2^53, or a decimal text ("-123", "000"); nil for anything else.
local function big(v)
  local a = {}
  if type(v) == "number" then
    if v ~= v or v < 0 or v >= 2^53 or v % 1 ~= 0 then return nil end
    while v > 0 do v, a[#a + 1] = divmod(v, BASE) end
    return a
  end
  local sign, digits = tostring(v or ""):match("^(%-?)(%d+)$")
  if not digits then return nil end
  for i = #digits, 1, -7 do a[#a + 1] = tonumber(digits:sub(math.max(1, i - 6), i)) end
  trim(a)
  if sign == "-" and #a > 0 then a.neg = true end
  return a
end

local function is_zero(a) return #a == 0 end

local function cmp_abs(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function add_abs(a, b)
  local r, carry = {}, 0
  for i = 1, math.max(#a, #b) do
    carry, r[i] = divmod((a[i] or 0) + (b[i] or 0) + carry, BASE)
  end
  if carry > 0 then r[#r + 1] = carry end
  return r
end

local function sub_abs(a, b)  -- |a| >= |b|
  local r, borrow = {}, 0
  for i = 1, #a do
    local x = a[i] - (b[i] or 0) - borrow
    borrow = x < 0 and 1 or 0
    r[i] = x + borrow * BASE
  end
  return trim(r)
end

local function add(a, b)  -- signed
  if not a.neg == not b.neg then
    local r = add_abs(a, b)
    r.neg = a.neg
    return trim(r)
  end
  if cmp_abs(a, b) >= 0 then
    local r = sub_abs(a, b)
    r.neg = a.neg
    return trim(r)
  end
  local r = sub_abs(b, a)
  r.neg = b.neg
  return trim(r)
end

local function neg(a)
  local r = {unpack(a)}
  r.neg = not a.neg or nil
  return trim(r)
end

local function cmp(a, b)  -- signed: -1, 0, 1
  if not a.neg ~= not b.neg then return a.neg and -1 or 1 end
  local c = cmp_abs(a, b)
  return a.neg and -c or c
end

local function mul(a, b)  -- magnitudes (every product here is of counts)
  local r = {}
  for i = 1, #a + #b do r[i] = 0 end
  for i = 1, #a do
    local carry = 0
    for j = 1, #b do
      carry, r[i + j - 1] = divmod(r[i + j - 1] + a[i] * b[j] + carry, BASE)
    end
    local k = i + #b
    while carry > 0 do
      carry, r[k] = divmod(r[k] + carry, BASE)
      k = k + 1
    end
  end
  return trim(r)
end

local function div_ceil(a, d)  -- ceil(a / d) for a >= 0 and a whole 0 < d < 9 x 10^8
  local q, rem = {}, 0
  for i = #a, 1, -1 do q[i], rem = divmod(rem * BASE + a[i], d) end
  trim(q)
  return rem > 0 and add_abs(q, {1}) or q
end

local function max_big(a, b) return cmp(a, b) >= 0 and a or b end

local function text(a)  -- decimal, as Python prints an int
  if #a == 0 then return "0" end
  local parts = {a.neg and "-" or "", string.format("%d", a[#a])}
  for i = #a - 1, 1, -1 do parts[#parts + 1] = string.format("%07d", a[i]) end
  return table.concat(parts)
end
