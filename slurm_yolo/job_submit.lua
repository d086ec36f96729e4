--[[ slurm-yolo native admission: slurmctld's job_submit/lua script.

Every submission (sbatch, srun, salloc, yolo-sbatch) passes here, inside slurmctld, one at a time.
A GPU job is refused at submit, with a message naming its account and the numbers, when its worst
case (time limit x GPUs x the partition's price x the QOS tier's rate: exactly what the prolog will
hold) exceeds what the account has left:

    left = balance in the ledger (holds already taken out)
         - worst cases of the account's pending GPU jobs (slurmctld's own job list)
         - worst cases of its running GPU jobs the ledger holds nothing for (just started, or a failed prolog)

The ledger publishes balances, prices (with their scheduled changes), tier rates and the jobs it
holds runs of to AVAILABILITY, a small text file it rewrites atomically after every write; this
script never writes the ledger. Installed by `slurm-yolo ledger admission-script >
/etc/slurm/job_submit.lua` (which fills in the paths, the cluster's name and the SlurmUser's uid
below) and `JobSubmitPlugins=lua` in slurm.conf. Without a readable AVAILABILITY file, GPU jobs are refused:
an unknown budget is not an unlimited one.
]]

local AVAILABILITY = "@AVAILABILITY@"
local REFUSALS = "@REFUSALS@"
local CLUSTER = "@CLUSTER@"

local NO_VAL, INFINITE, NO_VAL16 = 4294967294, 4294967295, 65534
local PENDING, RUNNING = 0, 1
local SOCKETS_UNKNOWN = 2

local function valid(n)
  return n ~= nil and n ~= NO_VAL and n ~= INFINITE and n ~= NO_VAL16
end

-- The published state: {stamp, unlimited, default_price, maxrate, price{partition: {{from, price}...}},
-- rate{}, shards{}, account{}, held{job id: true}}.
local function read_state()
  local f = io.open(AVAILABILITY, "r")
  if not f then return nil end
  local s = {price = {}, rate = {}, shards = {}, gpus = {}, account = {}, held = {}, maxrate = 1}
  local ok = false
  for line in f:lines() do
    local key, a, b, c = line:match("^(%S+) (%S+) ?(%S*) ?(%S*)$")
    if key == "slurm-yolo-availability" then ok = (a == "2")
    elseif key == "stamp" then s.stamp = tonumber(a)
    elseif key == "unlimited" then s.unlimited = tonumber(a)
    elseif key == "default_price" then s.default_price = tonumber(a)
    elseif key == "maxrate" then s.maxrate = tonumber(a)
    elseif key == "price" then
      s.price[a] = s.price[a] or {}
      table.insert(s.price[a], {tonumber(c) or 0, tonumber(b)})
    elseif key == "held" and a == CLUSTER then s.held[tonumber(b) or -1] = true
    elseif key == "rate" then s.rate[a] = tonumber(b)
    elseif key == "shards" then s.shards[a] = tonumber(b)
    elseif key == "gpus" then s.gpus[a] = tonumber(b)
    elseif key == "account" then s.account[a] = tonumber(b)
    end
  end
  f:close()
  if not (ok and s.stamp and s.unlimited and s.default_price) then return nil end
  return s
end

-- Whole GPUs and shards in a GRES/TRES list: "gres:gpu:t4:2", "gres/gpu:2", "gres/shard=4", "gpu".
local function gres_units(spec)
  local gpus, shards = 0, 0
  for item in tostring(spec or ""):gmatch("[^,]+") do
    item = item:gsub("^gres[:/]", "")
    local name, rest = item:match("^([%w_%-]+)(.*)$")
    local n = tonumber(rest and (rest:match(":(%d+)$") or rest:match("=(%d+)$")) or 1) or 1
    if name == "gpu" then gpus = gpus + n elseif name == "shard" then shards = shards + n end
  end
  return gpus, shards
end

-- A GPU share as the prolog counts it: whole GPUs, else shards as a share of one.
local function share(state, partition, gpus, shards)
  if gpus > 0 then return gpus end
  if shards > 0 then
    local per = state.shards[partition] or 0
    return per > 0 and shards / per or shards
  end
  return 0
end

-- The partition's price in effect now (versions in time order), as its prolog would hold it.
local function price_of(state, partition)
  local now, price = os.time(), state.default_price
  for _, v in ipairs(state.price[partition] or {}) do
    if v[1] <= now then price = v[2] end
  end
  return price
end

-- Tokens, rounded up to the token as the prolog rounds its exact product: a float within a
-- millionth of a whole number is that number (0.8 is not exact in binary), anything else goes up.
local function tokens(seconds, gpu_share, price, rate)
  local v = seconds * gpu_share * price * rate
  local whole = math.floor(v + 0.5)
  if math.abs(v - whole) <= 1e-6 then return whole end
  return math.ceil(v)
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

-- The GPUs and shards one task of a new submission asks for, over all its nodes, tasks and sockets.
local function desc_units(job_desc)
  local nodes = valid(job_desc.min_nodes) and job_desc.min_nodes or 1
  if valid(job_desc.max_nodes) and job_desc.max_nodes > nodes then nodes = job_desc.max_nodes end
  local tasks = valid(job_desc.num_tasks) and job_desc.num_tasks
    or nodes * (valid(job_desc.ntasks_per_node) and job_desc.ntasks_per_node or 1)
  local sockets = valid(job_desc.sockets_per_node) and job_desc.sockets_per_node or SOCKETS_UNKNOWN
  local gpus, shards = 0, 0
  for _, part in ipairs({
    {job_desc.tres_per_node or job_desc.gres, nodes}, {job_desc.tres_per_job, 1},
    {job_desc.tres_per_task, tasks}, {job_desc.tres_per_socket, nodes * sockets},
  }) do
    local g, s = gres_units(part[1])
    gpus, shards = gpus + g * part[2], shards + s * part[2]
  end
  return gpus, shards
end

-- The worst case of one task of a new submission, and how it was reckoned (its dearest partition).
local function desc_worst(state, job_desc, part_list)
  local gpus, shards = desc_units(job_desc)
  local exclusive = job_desc.shared == 0  -- --exclusive: every GPU of its nodes, asked for or not
  local names = job_desc.partition or default_partition(part_list) or ""
  local rate = state.rate[job_desc.qos or job_desc.default_qos or ""] or 1
  local worst, why, worst_seconds = 0, "", 0
  for name in names:gmatch("[^,]+") do
    local seconds = seconds_of(state, job_desc.time_limit, part_list[name])
    local units = share(state, name, gpus, shards)
    if exclusive then
      local nodes = valid(job_desc.min_nodes) and job_desc.min_nodes or 1
      units = math.max(units, nodes * (state.gpus[name] or 0))
    end
    local w = units > 0 and tokens(seconds, units, price_of(state, name), rate) or 0
    if w > 0 and w >= worst then
      worst, worst_seconds = w, seconds
      why = string.format("%d s x %g GPU x %d tokens/GPU-s on %s x rate %g", seconds, units,
                          price_of(state, name), name, rate)
    end
  end
  return worst, why, worst_seconds
end

-- Admissions of the last two seconds: slurmctld refreshes the script's copy of its job list
-- (slurm.jobs) at most once a second, so a job admitted this second may be missing from it. Counted
-- twice (here and in slurm.jobs) for up to two seconds: conservative, never generous.
local recent = {}

local function recently_admitted(account)
  local now, total, keep = os.time(), 0, {}
  for _, r in ipairs(recent) do
    if r.t >= now - 1 then
      keep[#keep + 1] = r
      if r.account == account then total = total + r.need end
    end
  end
  recent = keep
  return total
end

-- What the account's pending GPU jobs, and its running ones the ledger holds nothing for yet (just
-- started, or their prolog failed), may still hold.
local function committed(state, account)
  local total = recently_admitted(account)
  for _, job in pairs(slurm.jobs or {}) do
    local st = (job.job_state or -1) % 256
    local unheld = st == RUNNING and not state.held[job.job_id]
    if job.account == account and (st == PENDING or unheld) then
      local tasks = st == PENDING and math.max(job.array_task_cnt or 1, 1) or 1
      local g, s = gres_units(job.tres_fmt_req_str)  -- what it asked for, over all its nodes
      if g > 0 or s > 0 then
        local rate = job.qos and (state.rate[job.qos] or 1) or state.maxrate  -- no QOS known: the dearest
        local worst = 0
        for name in tostring(job.partition or ""):gmatch("[^,]+") do
          local w = tokens(seconds_of(state, job.time_limit, nil), share(state, name, g, s), price_of(state, name), rate)
          if w > worst then worst = w end
        end
        total = total + worst * tasks
      end
    end
  end
  return total
end

-- One line per refusal for `slurm-yolo alerts`; the account as Slurm could ever name one (anything
-- else in a user's --account becomes "?", so no line can pose as another).
local function note_refusal(account, uid, need, left)
  local f = io.open(REFUSALS, "a")
  if f then
    local name = account:gsub("[^%w_.%-]", "?")
    if name == "" then name = "?" end
    f:write(string.format("%d %s %d %.0f %.0f\n", os.time(), name, uid, need, left))
    f:close()
  end
end

local function fmt(n)
  local s = string.format("%.0f", n)
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^(%-?),", "%1"))
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  local state = read_state()
  if state == nil then
    local gpus, shards = desc_units(job_desc)
    if gpus > 0 or shards > 0 then
      slurm.log_user("slurm-yolo: token balances are not published (" .. AVAILABILITY ..
                     "): GPU jobs cannot be admitted; tell your admin")
      return slurm.ERROR
    end
    return slurm.SUCCESS
  end
  local worst, why, seconds = desc_worst(state, job_desc, part_list)
  if worst == 0 then return slurm.SUCCESS end
  local tasks = array_size(job_desc.array_inx)
  if tasks == nil then
    slurm.log_user("slurm-yolo: --array=" .. tostring(job_desc.array_inx) .. " not understood (e.g. 0-9, 1,3,5, 0-99:2%4)")
    return slurm.ESLURM_INVALID_ARRAY or slurm.ERROR
  end
  if not valid(job_desc.time_limit) and seconds == state.unlimited then
    job_desc.time_limit = math.floor(state.unlimited / 60)  -- a GPU job without a limit runs as long as it holds for
  end
  local need = worst * tasks
  local account = job_desc.account or job_desc.default_account or ""
  local balance = state.account[account] or 0
  local pending = committed(state, account)
  local left = balance - pending
  if need > left then
    note_refusal(account, submit_uid or -1, need, left)
    slurm.log_user(string.format(
      "slurm-yolo: account %s cannot cover this job: its worst case is %s tokens (%s%s), " ..
      "the account has %s left (balance %s, minus %s for its pending and starting GPU jobs)",
      account, fmt(need), why, tasks > 1 and string.format(" x %d array tasks", tasks) or "",
      fmt(left), fmt(balance), fmt(pending)))
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
  if limit ~= nil and limit ~= NO_VAL and (was == nil or was == NO_VAL or limit > was) then
    slurm.log_user("slurm-yolo: a submitted job's time limit can only be lowered (its budget was checked" ..
                   " at submission): cancel and resubmit")
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
