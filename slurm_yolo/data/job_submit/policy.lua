-- The billing policy, as slurm_yolo/core/billing (policy.py, bucket.py) and the ledger's prices
-- reckon it, function by function: a GPU job's worst case (time limit x GPUs x the partition's price
-- x the QOS tier's rate: exactly what the prolog will hold), in whole numbers (bigint.lua), one
-- rounding: tokens = ceil(seconds x GPUs x price x rate_ppm / (shards per GPU x 10^6)).
-- tests/controller/test_job_submit_lua.py checks it against the Python policy and the shared vectors
-- (tests/vectors/billing.json). Bounds: counts Slurm passes as numbers (time limits, nodes, tasks,
-- array indices) are below 2^53, and shards per GPU below 9 x 10^8.

local NO_VAL, INFINITE, NO_VAL16 = 4294967294, 4294967295, 65534
local PENDING, RUNNING = 0, 1
local SOCKETS_UNKNOWN = 2
-- The longest limit a GPU job may ask (hooks.PAST_A_YEAR_AT_LEAST): 22.05's scontrol prints a longer
-- one as INVALID, and a prolog that cannot read a limit holds this much; a longer job would run past it.
local MAX_LIMIT_SECONDS = @MAX_LIMIT_SECONDS@  -- durations.YEAR, filled in at install
local COVER_MARGIN_SECONDS = @COVER_MARGIN_SECONDS@  -- bucket.COVER_MARGIN_SECONDS

local function valid(n)
  return n ~= nil and n ~= NO_VAL and n ~= INFINITE and n ~= NO_VAL16
end

local ZERO, ONE, MILLION = big(0), big(1), big(1000000)

-- Whole GPUs and shards (bigs) in a GRES/TRES list: "gres:gpu:t4:2", "gres/gpu:2", "gres/shard=4", "gpu".
local function gres_units(spec)
  local gpus, shards = ZERO, ZERO
  for item in tostring(spec or ""):gmatch("[^,]+") do
    item = item:gsub("^gres[:/]", "")
    local name, rest = item:match("^([%w_%-]+)(.*)$")
    local n = big(rest and (rest:match(":(%d+)$") or rest:match("=(%d+)$")) or "1")
    if name == "gpu" then gpus = add(gpus, n) elseif name == "shard" then shards = add(shards, n) end
  end
  return gpus, shards
end

-- A GPU share as the prolog counts it (policy.share): {num = whole GPUs, den = 1}, else {num =
-- shards, den = shards per GPU} (den 1 when the partition has none configured).
local function share(state, partition, gpus, shards)
  if not is_zero(gpus) then return {num = gpus, den = 1} end
  local per = state.shards[partition] or 0
  return {num = shards, den = per > 0 and per or 1}
end

local function share_text(units)
  return units.den == 1 and text(units.num) or text(units.num) .. "/" .. units.den
end

local function rate_text(ppm)  -- policy.rate_text: 800000 -> "0.8"
  local digits = string.rep("0", 7 - #text(ppm)) .. text(ppm)
  local whole, frac = digits:sub(1, -7), digits:sub(-6):gsub("0+$", "")
  return frac == "" and whole or whole .. "." .. frac
end

-- The partition's price in effect now (versions in time order), as its prolog would hold it: this
-- cluster's own, where one is in effect, else every cluster's, else the default.
local function price_of(state, partition)
  local now, price, own = os.time(), state.default_price, nil
  for _, v in ipairs(state.price[partition] or {}) do
    if v[1] <= now then price = v[2] end
  end
  for _, v in ipairs(state.own_price[partition] or {}) do
    if v[1] <= now then own = v[2] end
  end
  return own or price
end

-- policy.tokens: ceil(seconds x share x price x rate_ppm / 10^6), exactly (ceil(ceil(n / a) / b)
-- is ceil(n / (a b)) for whole a, b > 0, so the two divisions round once).
local function tokens(seconds, units, price, rate)
  return div_ceil(div_ceil(mul(mul(mul(big(seconds), units.num), price), rate), 1000000), units.den)
end

local function seconds_of(state, minutes, part)
  if not valid(minutes) then
    minutes = part and (valid(part.default_time) and part.default_time or part.max_time) or INFINITE
  end
  if not valid(minutes) then return state.unlimited end
  return minutes * 60
end

-- Tasks in an --array spec ("0-9:2,15%4", "[0-9]"); nil for a spec this cannot read (refused).
local function array_size(spec)
  if spec == nil or spec == "" then return 1 end
  local text = tostring(spec):gsub("%%.*$", ""):gsub("[%[%]%s]", "")
  local n = 0
  if text:match("%d%d%d%d%d%d%d%d%d%d") then return nil end  -- no index past 9 digits (Slurm's are 7)
  for range in text:gmatch("[^,]+") do
    local lo, hi, step = range:match("^(%d+)%-(%d+):?(%d*)$")
    if lo and tonumber(hi) >= tonumber(lo) then
      n = n + math.floor((tonumber(hi) - tonumber(lo)) / math.max(tonumber(step) or 1, 1)) + 1
    elseif range:match("^%d+$") then
      n = n + 1
    else
      return nil
    end
  end
  return n > 0 and n or nil
end

local function default_partition(part_list)
  for name, part in pairs(part_list) do
    if part.flag_default == 1 then return name end
  end
  return nil
end

-- The GPUs and shards (bigs) one task of a new submission asks for, over all its nodes, tasks and sockets.
local function desc_units(job_desc)
  local nodes = valid(job_desc.min_nodes) and job_desc.min_nodes or 1
  if valid(job_desc.max_nodes) and job_desc.max_nodes > nodes then nodes = job_desc.max_nodes end
  nodes = big(nodes)
  local tasks = valid(job_desc.num_tasks) and big(job_desc.num_tasks)
    or mul(nodes, big(valid(job_desc.ntasks_per_node) and job_desc.ntasks_per_node or 1))
  local sockets = big(valid(job_desc.sockets_per_node) and job_desc.sockets_per_node or SOCKETS_UNKNOWN)
  local gpus, shards = ZERO, ZERO
  for _, part in ipairs({
    {job_desc.tres_per_node or job_desc.gres, nodes}, {job_desc.tres_per_job, ONE},
    {job_desc.tres_per_task, tasks}, {job_desc.tres_per_socket, mul(nodes, sockets)},
  }) do
    local g, s = gres_units(part[1])
    gpus, shards = add(gpus, mul(g, part[2])), add(shards, mul(s, part[2]))
  end
  -- --ntasks-per-gpu names no count: Slurm gives the job tasks / that many GPUs after this script ran
  if valid(job_desc.ntasks_per_tres) and job_desc.ntasks_per_tres > 0 then
    gpus = max_big(gpus, div_ceil(tasks, job_desc.ntasks_per_tres))
  end
  return gpus, shards
end

-- policy.exempt: a run on a partition or of an account the site keeps off the books.
local function exempt(state, partition, account)
  return state.exempt_partition[partition] == true or state.exempt_account[string.lower(account)] == true
end

-- The worst case of one task of a new submission, and how it was reckoned (its dearest partition
-- that is not exempt: where it runs, the prolog holds nothing).
local function desc_worst(state, job_desc, part_list)
  local gpus, shards = desc_units(job_desc)
  local exclusive = job_desc.shared == 0  -- --exclusive: every GPU of its nodes, asked for or not
  local names = job_desc.partition or default_partition(part_list) or ""
  local rate = state.rate[string.lower(job_desc.qos or job_desc.default_qos or "")] or MILLION  -- as Slurm folds it
  local worst, why, worst_seconds = ZERO, "", 0
  for name in names:gmatch("[^,]+") do
    local seconds = seconds_of(state, job_desc.time_limit, part_list[name])
    local units = share(state, name, gpus, shards)
    if exclusive then
      local all = mul(big(valid(job_desc.min_nodes) and job_desc.min_nodes or 1), big(state.gpus[name] or 0))
      if cmp(mul(all, big(units.den)), units.num) > 0 then units = {num = all, den = 1} end
    end
    local w = exempt(state, name, "") and ZERO or tokens(seconds, units, price_of(state, name), rate)
    if not is_zero(w) and cmp(w, worst) >= 0 then
      worst, worst_seconds = w, seconds
      why = string.format("%d s x %s GPU x %s tokens/GPU-s on %s x rate %s", seconds, share_text(units),
                          text(price_of(state, name)), name, rate_text(rate))
    end
  end
  return worst, why, worst_seconds
end

-- How long until the account's refill covers ``total`` (its pending worst cases and this job's) from
-- ``balance``, when that is within the configured wait (bucket.seconds_to_cover); nil: never, or later.
-- In seconds from now, from the published balance (older than the ledger's: never sooner than it).
local function credit_wait(state, account, total, balance)
  local q = state.quota[account]
  if not q or not q.capacity or not q.per_day or q.per_day <= 0 or state.credit_wait <= 0
     or cmp(total, q.capacity) > 0 then
    return nil
  end
  local short = tonumber(text(add(total, neg(balance)))) or math.huge
  local wait = math.ceil(short / q.per_day * 86400) + COVER_MARGIN_SECONDS  -- os.time() is truncated
  if wait > state.credit_wait then return nil end
  return wait
end

local function fmt(n)
  local out = text(n):reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^(%-?),", "%1"))
end
