--[[ slurm-yolo native admission: slurmctld's job_submit/lua script.

Every submission (sbatch, srun, salloc, yolo-sbatch) passes here, inside slurmctld, one at a time.
A GPU job is refused at submit, with a message naming its account and the numbers, when its worst
case (time limit x GPUs x the partition's price x the QOS tier's rate: exactly what the prolog will
hold) exceeds what the account has left:

    left = balance in the ledger (holds already taken out)
         - worst cases of the account's pending GPU jobs (slurmctld's own job list)
         - worst cases of its running GPU jobs the ledger holds nothing for (just started, or a failed prolog)

On a ledger several clusters share (the MariaDB backend), what one cluster's slurmctld sees is not
enough: the script asks the ledger itself through the hook client (`slurm-yolo-hook admit`, answered
by hookd in one ledger turn with every cluster's admissions, against the balance as it is now:
slurm_yolo/controller/shared_admission.py), and no answer is a refusal.

The ledger publishes balances, prices (with their scheduled changes), tier rates and the jobs it
holds runs of to AVAILABILITY, a small text file it rewrites atomically after every write; this
script never writes the ledger. Installed by `slurm-yolo ledger admission-script >
/etc/slurm/job_submit.lua` (which fills in the paths, the cluster's name and the SlurmUser's uid
below) and `JobSubmitPlugins=lua` in slurm.conf. Without a readable AVAILABILITY file, GPU jobs are refused:
an unknown budget is not an unlimited one.

Money is counted exactly, as slurm_yolo/core/billing/policy.py counts it: whole numbers of any size (the
`big` functions below: slurmctld 22.05 embeds Lua 5.1, whose numbers are doubles, exact only below
2^53), one rounding (tokens = ceil(seconds x GPUs x price x rate_ppm / (shards per GPU x 10^6))).
tests/test_job_submit_lua.py runs this script against the policy. Bounds: counts Slurm passes as
numbers (time limits, nodes, tasks, array indices) are below 2^53, and shards per GPU below 9 x 10^8.
]]

local AVAILABILITY = "@AVAILABILITY@"
local REFUSALS = "@REFUSALS@"
local CLUSTER = "@CLUSTER@"
local HOOK_CLIENT = "@HOOK_CLIENT@"  -- asked on a shared ledger (ask_ledger)
local HOOKD_SOCKET = "@HOOKD_SOCKET@"

local NO_VAL, INFINITE, NO_VAL16 = 4294967294, 4294967295, 65534
local PENDING, RUNNING = 0, 1
local SOCKETS_UNKNOWN = 2
-- The longest limit a GPU job may ask (hooks.PAST_A_YEAR_AT_LEAST): 22.05's scontrol prints a longer
-- one as INVALID, and a prolog that cannot read a limit holds this much; a longer job would run past it.
local MAX_LIMIT_SECONDS = 366 * 86400

local function valid(n)
  return n ~= nil and n ~= NO_VAL and n ~= INFINITE and n ~= NO_VAL16
end

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

local ZERO, ONE, MILLION = big(0), big(1), big(1000000)

local PRICING = {unlimited = true, default_price = true, maxrate = true, price = true, rate = true, shards = true}

-- The published state: {stamp, unlimited, shared, default_price, maxrate, price{partition: {{from, price}...}},
-- own_price{} (this cluster's), rate{} (this cluster's where it has one), shards{}, account{},
-- quota{account: {capacity, per_day}}, credit_wait (seconds), held{job id: true}}.
local function read_state()
  local f = io.open(AVAILABILITY, "r")
  if not f then return nil end
  local s = {price = {}, own_price = {}, rate = {}, shards = {}, gpus = {}, account = {}, quota = {}, held = {},
             maxrate = MILLION, credit_wait = 0}
  local own_rate, pricing, now = {}, {}, os.time()
  local ok = false
  for line in f:lines() do
    local key, a, b, c, d = line:match("^(%S+) (%S+) ?(%S*) ?(%S*) ?(%S*)$")
    if PRICING[key] then  -- what a worst case is reckoned from, and which price versions are in effect now
      pricing[#pricing + 1] = key == "price" and (tonumber(c) or 0) > now and line .. " later" or line
    end
    if key == "slurm-yolo-availability" then ok = (a == "4")
    elseif key == "stamp" then s.stamp = tonumber(a)
    elseif key == "unlimited" then s.unlimited = tonumber(a)
    elseif key == "shared" then s.shared = (a == "1")
    elseif key == "default_price" then s.default_price = big(a)
    elseif key == "maxrate" then s.maxrate = big(a) or s.maxrate
    elseif key == "price" and big(b) and (d == "" or d == CLUSTER) then  -- d: this cluster's own price
      local list = d == "" and s.price or s.own_price
      list[a] = list[a] or {}
      table.insert(list[a], {tonumber(c) or 0, big(b)})
    elseif key == "held" and a == CLUSTER then s.held[tonumber(b) or -1] = true
    elseif key == "rate" and c == CLUSTER then own_rate[a] = big(b)
    elseif key == "rate" and c == "" then s.rate[a] = big(b)
    elseif key == "shards" then s.shards[a] = tonumber(b)
    elseif key == "gpus" then s.gpus[a] = tonumber(b)
    elseif key == "account" then s.account[a], s.quota[a] = big(b), {capacity = big(c), per_day = tonumber(d)}
    elseif key == "creditwait" then s.credit_wait = tonumber(a)
    end
  end
  f:close()
  for qos, rate in pairs(own_rate) do s.rate[qos] = rate end  -- this cluster's rate before every cluster's
  s.pricing = table.concat(pricing, "\n")
  if not (ok and s.stamp and s.unlimited and s.default_price) then return nil end
  return s
end

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

-- The worst case of one task of a new submission, and how it was reckoned (its dearest partition).
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
    local w = tokens(seconds, units, price_of(state, name), rate)
    if not is_zero(w) and cmp(w, worst) >= 0 then
      worst, worst_seconds = w, seconds
      why = string.format("%d s x %s GPU x %s tokens/GPU-s on %s x rate %s", seconds, share_text(units),
                          text(price_of(state, name)), name, rate_text(rate))
    end
  end
  return worst, why, worst_seconds
end

-- Admissions of the last two seconds: slurmctld refreshes the script's copy of its job list
-- (slurm.jobs) at most once a second, so a job admitted this second may be missing from it. Counted
-- twice (here and in slurm.jobs) for up to two seconds: conservative, never generous.
local recent = {}

-- Per account, what its pending GPU jobs and its running ones the ledger holds nothing for yet (just
-- started, or their prolog failed) may still hold, with the admissions of the last two seconds.
-- One task's worst case for each kind of pending job (what it asked for, where, for how long, its
-- QOS), kept while what it was reckoned from (prices in effect, rates, shards) stays the same: a
-- queue of many alike jobs (arrays, repeated submissions) costs one reckoning per kind.
local worst_of, worst_pricing, kinds = {}, nil, 0

local function job_worst(state, job, g, s)
  if worst_pricing ~= state.pricing or kinds > 10000 then worst_of, worst_pricing, kinds = {}, state.pricing, 0 end
  local key = table.concat({tostring(job.tres_fmt_req_str), tostring(job.partition), tostring(job.time_limit),
                            tostring(job.qos)}, "\1")
  local worst = worst_of[key]
  if worst then return worst end
  local rate = job.qos and (state.rate[job.qos] or MILLION) or state.maxrate  -- no QOS known: the dearest
  worst = ZERO
  for name in tostring(job.partition or ""):gmatch("[^,]+") do
    worst = max_big(worst, tokens(seconds_of(state, job.time_limit, nil), share(state, name, g, s),
                                  price_of(state, name), rate))
  end
  worst_of[key], kinds = worst, kinds + 1
  return worst
end

local function committed(state)
  local now, totals, keep = os.time(), {}, {}
  for _, r in ipairs(recent) do
    if r.t >= now - 1 then
      keep[#keep + 1] = r
      totals[r.account] = add(totals[r.account] or ZERO, r.need)
    end
  end
  recent = keep
  for id, job in pairs(slurm.jobs or {}) do
    -- Numbers first: 22.05's slurmctld died in job_submit/lua reading a job record's string field
    -- (strlen on freed memory) in CI's chaos test. Its slurm.jobs is rebuilt only when the job list
    -- changed in a later second, so a record purged in the second it was built is freed memory: a
    -- record whose id is not its key is skipped, and only the jobs that count (pending, or running
    -- unheld) have their strings read.
    local st = tostring(job.job_id) == id and (job.job_state or -1) % 256 or -1
    local unheld = st == RUNNING and not state.held[job.job_id]
    if (st == PENDING or unheld) and job.account then
      local tasks = big(st == PENDING and math.max(job.array_task_cnt or 1, 1) or 1)
      local g, s = gres_units(job.tres_fmt_req_str)  -- what it asked for, over all its nodes
      if not (is_zero(g) and is_zero(s)) then
        totals[job.account] = add(totals[job.account] or ZERO, mul(job_worst(state, job, g, s), tasks))
      end
    end
  end
  return totals
end

local function plain(name)  -- a name as Slurm makes them: safe on a command line as it is
  return type(name) == "string" and #name <= 190 and name:match("^[%w_.%-]+$") ~= nil
end

-- On a ledger several clusters share, the ledger's own word (slurm_yolo/controller/shared_admission.py): this
-- cluster's commitments go there, and the job fits only against every cluster's. The answer line:
-- "ok", "refused BALANCE HERE ELSEWHERE" or "error: ..." (nil: no answer at all).
local function ask_ledger(account, need, totals)
  local args = {"admit", CLUSTER, account, text(need)}
  for name, total in pairs(totals) do
    if plain(name) and not is_zero(total) then args[#args + 1] = name .. "=" .. text(total) end
  end
  local p = io.popen("SLURM_YOLO_HOOKD_SOCKET='" .. HOOKD_SOCKET .. "' '" .. HOOK_CLIENT .. "' " ..
                     table.concat(args, " ") .. " 2>&1", "r")
  if not p then return nil end
  local line = p:read("*l")
  p:close()
  return line
end

-- One line per refusal for `slurm-yolo alerts`; the account as Slurm could ever name one (anything
-- else in a user's --account becomes "?", so no line can pose as another).
local function note_refusal(account, uid, need, left)
  local f = io.open(REFUSALS, "a")
  if f then
    local name = account:gsub("[^%w_.%-]", "?")
    if name == "" then name = "?" end
    f:write(string.format("%d %s %d %s %s\n", os.time(), name, uid, text(need), text(left)))
    f:close()
  end
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
  local wait = math.ceil(short / q.per_day * 86400) + 2  -- bucket.COVER_MARGIN_SECONDS: os.time() is truncated
  if wait > state.credit_wait then return nil end
  return wait
end

-- The job starts no sooner than ``wait`` seconds from now (a later --begin of its own stays); the user
-- is told when, and squeue shows BeginTime.
local function wait_for_credits(job_desc, account, wait)
  local begin = os.time() + wait
  if not valid(job_desc.begin_time) or (job_desc.begin_time or 0) < begin then job_desc.begin_time = begin end
  slurm.log_user(string.format("slurm-yolo: account %s waits for credits: its refill covers this job by %s" ..
                               " (in %d min); the job waits until then and starts by itself (squeue: BeginTime)",
                               account, os.date("%H:%M", begin), math.ceil(wait / 60)))
end

local function fmt(n)
  local out = text(n):reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^(%-?),", "%1"))
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local state = read_state()
  if state == nil then
    local gpus, shards = desc_units(job_desc)
    if not (is_zero(gpus) and is_zero(shards)) then
      slurm.log_user("slurm-yolo: token balances are not published (" .. AVAILABILITY ..
                     "): GPU jobs cannot be admitted; tell your admin")
      return slurm.ERROR
    end
    return slurm.SUCCESS
  end
  local worst, why, seconds = desc_worst(state, job_desc, part_list)
  if is_zero(worst) then return slurm.SUCCESS end
  if seconds > MAX_LIMIT_SECONDS then
    slurm.log_user(string.format("slurm-yolo: a GPU job's time limit can be at most 366 days (this one: %d days);" ..
                                 " set a shorter --time", math.floor(seconds / 86400)))
    return slurm.ESLURM_INVALID_TIME_LIMIT or slurm.ERROR
  end
  local tasks = array_size(job_desc.array_inx)
  if tasks == nil then
    slurm.log_user("slurm-yolo: --array=" .. tostring(job_desc.array_inx) .. " not understood (e.g. 0-9, 1,3,5, 0-99:2%4)")
    return slurm.ESLURM_INVALID_ARRAY or slurm.ERROR
  end
  if not valid(job_desc.time_limit) and seconds == state.unlimited then
    job_desc.time_limit = math.floor(state.unlimited / 60)  -- a GPU job without a limit runs as long as it holds for
  end
  local need = mul(worst, big(tasks))
  local account = string.lower(job_desc.account or job_desc.default_account or "")  -- Slurm folds -A VISION to vision
  local totals = committed(state)
  local balance, pending, elsewhere = state.account[account] or ZERO, totals[account] or ZERO, nil
  local line  -- the shared ledger's answer
  if state.shared and not plain(account) then  -- no account Slurm could have: nothing to spend
    balance, elsewhere = ZERO, ZERO
  elseif state.shared then  -- the ledger decides, with every cluster's commitments and its own balance
    line = ask_ledger(account, need, totals)
    local b, here, there = tostring(line or ""):match("^refused (%-?%d+) (%d+) (%d+)$")
    local wait = tonumber(tostring(line or ""):match("^wait (%d+)$"))
    if wait then  -- the ledger counts it now, as a pending job of this cluster
      wait_for_credits(job_desc, account, wait)
      recent[#recent + 1] = {t = os.time(), account = account, need = need}
      return slurm.SUCCESS
    elseif b then
      balance, pending, elsewhere = big(b), big(here), big(there)
    elseif line ~= "ok" then
      slurm.log_user("slurm-yolo: the shared token ledger did not answer (" .. tostring(line or "no answer"):sub(1, 200) ..
                     "): GPU jobs cannot be admitted now; try again in a minute, and tell your admin if it lasts")
      return slurm.ERROR
    end
  end
  local left = add(add(balance, neg(pending)), neg(elsewhere or ZERO))
  local wait = not state.shared and cmp(need, left) > 0 and credit_wait(state, account, add(need, pending), balance)
  if wait then
    wait_for_credits(job_desc, account, wait)
  elseif line ~= "ok" and cmp(need, left) > 0 then  -- "ok": the ledger's balance is fresher than the published one
    note_refusal(account, submit_uid or -1, need, left)
    local where = elsewhere and string.format(
      " across the clusters that share its budget (balance %s, minus %s for its pending and starting GPU jobs" ..
      " here and %s for those on the other clusters)", fmt(balance), fmt(pending), fmt(elsewhere))
      or string.format(" (balance %s, minus %s for its pending and starting GPU jobs)", fmt(balance), fmt(pending))
    slurm.log_user(string.format(
      "slurm-yolo: account %s cannot cover this job: its worst case is %s tokens (%s%s), the account has %s left%s",
      account, fmt(need), why, tasks > 1 and string.format(" x %d array tasks", tasks) or "", fmt(left), where))
    return slurm.ESLURM_ACCOUNTING_POLICY or slurm.ERROR
  end
  recent[#recent + 1] = {t = os.time(), account = account, need = need}
  return slurm.SUCCESS
end

-- A pending job's GPUs, nodes, partition, account, QOS and array are what admission priced: a user
-- changes them by resubmitting (admins and the SlurmUser may still update them). scontrol does not
-- show a job_modify message, so the refusal reads "Access/permission denied".
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 or modify_uid == slurm_user_id then return slurm.SUCCESS end
  local fields = {"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "gres",
                  "partition", "account", "qos", "array_inx"}
  for _, name in ipairs(fields) do
    if job_desc[name] ~= nil then
      slurm.log_user("slurm-yolo: " .. name .. " of a submitted job cannot change (its budget " ..
                     "was checked at submission): cancel and resubmit")
      return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
    end
  end
  local limit, was = job_desc.time_limit, job_rec.time_limit
  if limit == 0 then  -- a run with limit 0 holds nothing while slurmctld takes its time to end it
    slurm.log_user("slurm-yolo: a submitted job's time limit cannot be set to 0: cancel it instead")
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
  end
  if limit ~= nil and limit ~= NO_VAL and (was == nil or was == NO_VAL or limit > was) then
    slurm.log_user("slurm-yolo: a submitted job's time limit can only be lowered (its budget was checked" ..
                   " at submission): cancel and resubmit")
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
  end
  local begin, began = job_desc.begin_time, job_rec.begin_time
  if valid(begin) and begin ~= 0 and (not valid(began) or begin < began) then
    -- a job that waits for credits waits for its begin time alone: earlier, it would start uncovered
    slurm.log_user("slurm-yolo: a submitted job's begin time can only move later (it may be waiting for" ..
                   " its account's credits): cancel and resubmit")
    return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
  end
  for _, name in ipairs({"min_nodes", "max_nodes", "num_tasks", "ntasks_per_node", "shared"}) do
    if valid(job_desc[name]) then
      slurm.log_user("slurm-yolo: " .. name .. " of a submitted job cannot change (its budget " ..
                     "was checked at submission): cancel and resubmit")
      return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
    end
  end
  return slurm.SUCCESS
end

slurm_user_id = tonumber("@SLURM_UID@") or -1
