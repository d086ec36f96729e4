-- What admission knows: the balances, prices (with their scheduled changes), tier rates and held
-- runs the ledger publishes to AVAILABILITY (a small text file it rewrites atomically after every
-- write; this script never writes the ledger; without it, GPU jobs are refused: an unknown budget is
-- not an unlimited one), slurmctld's own job list (what is pending), and on a ledger several clusters
-- share, the ledger's own word through the hook client (slurm_yolo/controller/shared_admission.py).

local AVAILABILITY = "@AVAILABILITY@"
local REFUSALS = "@REFUSALS@"
local CLUSTER = "@CLUSTER@"
local HOOK_CLIENT = "@HOOK_CLIENT@"  -- asked on a shared ledger (ask_ledger)
local HOOKD_SOCKET = "@HOOKD_SOCKET@"

local PRICING = {unlimited = true, default_price = true, maxrate = true, price = true, rate = true, shards = true,
                 exempt = true}

-- The published state: {stamp, unlimited, shared, default_price, maxrate, price{partition: {{from, price}...}},
-- own_price{} (this cluster's), rate{} (this cluster's where it has one), shards{}, account{},
-- quota{account: {capacity, per_day}}, credit_wait (seconds), held{job id: true},
-- exempt_partition{name: true}, exempt_account{name in lower case: true}}.
local function read_state()
  local f = io.open(AVAILABILITY, "r")
  if not f then return nil end
  local s = {price = {}, own_price = {}, rate = {}, shards = {}, gpus = {}, account = {}, quota = {}, held = {},
             exempt_partition = {}, exempt_account = {}, maxrate = MILLION, credit_wait = 0}
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
    elseif key == "exempt" and a == "partition" then s.exempt_partition[b] = true
    elseif key == "exempt" and a == "account" then s.exempt_account[string.lower(b)] = true
    end
  end
  f:close()
  for qos, rate in pairs(own_rate) do s.rate[qos] = rate end  -- this cluster's rate before every cluster's
  s.pricing = table.concat(pricing, "\n")
  if not (ok and s.stamp and s.unlimited and s.default_price) then return nil end
  return s
end

-- Admissions of the last two seconds: slurmctld refreshes the script's copy of its job list
-- (slurm.jobs) at most once a second, so a job admitted this second may be missing from it. Counted
-- twice (here and in slurm.jobs) for up to two seconds: conservative, never generous.
local recent = {}

-- yolo-sbatch's trials. `-p auto` asks `sbatch --test-only` of each partition's job script, and
-- slurmctld runs this script for that will_run RPC as for a submission (proc_req.c:
-- _slurm_rpc_job_will_run -> validate_job_create_req): the same job_desc, nothing in it that tells
-- the two apart (22.05, 24.11, 26.05). Counted in `recent`, each admitted trial made the next trial
-- and the real submission (and anyone else's of the account in those two seconds) pay for it again,
-- and each false refusal went to refusals.log. So slurm_yolo.slurm.commands.will_run marks its
-- trials with this comment (a --comment on the command line wins over the script's #SBATCH one), and
-- a marked submission is checked as any (refused with its true numbers when it does not fit), but is
-- neither counted in `recent` nor noted as a refusal. Users can forge the mark on a real job, so a
-- marked submission is always held (priority 0: squeue shows JobHeldUser) and its user can neither
-- release it nor change its comment (modify.lua): it stays pending, counted in slurm.jobs from the
-- next refresh on, until its user cancels it or an admin releases it. A trial itself is never a job.
local TRIAL_MARK = "slurm-yolo:trial"

local function held_trial(job_desc)  -- whether it bears the mark: then it is held
  if job_desc.comment ~= TRIAL_MARK then return false end
  job_desc.priority = 0
  return true
end

local function remember(trial, account, need)  -- an admission of the last two seconds (a trial is none)
  if not trial then recent[#recent + 1] = {t = os.time(), account = account, need = need} end
end

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
    if not exempt(state, name, "") then
      worst = max_big(worst, tokens(seconds_of(state, job.time_limit, nil), share(state, name, g, s),
                                    price_of(state, name), rate))
    end
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
    if (st == PENDING or unheld) and job.account and not exempt(state, "", job.account) then
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

-- The job starts no sooner than ``wait`` seconds from now (a later --begin of its own stays); the user
-- is told when, and squeue shows BeginTime.
local function wait_for_credits(job_desc, account, wait)
  local begin = os.time() + wait
  if not valid(job_desc.begin_time) or (job_desc.begin_time or 0) < begin then job_desc.begin_time = begin end
  slurm.log_user(string.format("slurm-yolo: account %s waits for credits: its refill covers this job by %s" ..
                               " (in %d min); the job waits until then and starts by itself (squeue: BeginTime)",
                               account, os.date("%H:%M", begin), math.ceil(wait / 60)))
end
