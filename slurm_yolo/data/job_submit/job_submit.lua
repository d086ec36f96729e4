--[[ slurm-yolo native admission: slurmctld's job_submit/lua script.

Every submission (sbatch, srun, salloc, yolo-sbatch) passes here, inside slurmctld, one at a time. A
GPU job is refused at submit, with a message naming its account and the numbers, when its worst case
(policy.lua) exceeds what the account has left (state.lua):

    left = balance in the ledger (holds already taken out)
         - worst cases of the account's pending GPU jobs (slurmctld's own job list)
         - worst cases of its running GPU jobs the ledger holds nothing for (just started, or a failed prolog)

Installed by `slurm-yolo ledger admission-script > /etc/slurm/job_submit.lua` (which joins bigint.lua,
policy.lua, state.lua and modify.lua in here and fills in the paths, the cluster's name and the
SlurmUser's uid) and `JobSubmitPlugins=lua` in slurm.conf. docs/money.md says why each rule is so.
]]

--@MODULES@

function slurm_job_submit(job_desc, part_list, submit_uid)
  -- yolo-sbatch's trial (state.lua: TRIAL_MARK) is checked as any, counted nowhere, and held
  local trial = held_trial(job_desc)
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
  local account = string.lower(job_desc.account or job_desc.default_account or "")  -- Slurm folds -A VISION to vision
  if exempt(state, "", account) then return slurm.SUCCESS end  -- off the books: its prolog holds nothing
  local worst, why, seconds = desc_worst(state, job_desc, part_list)
  if is_zero(worst) then return slurm.SUCCESS end
  if seconds > MAX_LIMIT_SECONDS then
    slurm.log_user(string.format("slurm-yolo: a GPU job's time limit can be at most %d days (this one: %d days);" ..
                                 " set a shorter --time", MAX_LIMIT_SECONDS / 86400, math.floor(seconds / 86400)))
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
  local totals = committed(state)
  local balance, pending, elsewhere = state.account[account] or ZERO, totals[account] or ZERO, nil
  local line  -- the shared ledger's answer
  if state.shared and not plain(account) then  -- no account Slurm could have: nothing to spend
    balance, elsewhere = ZERO, ZERO
  elseif state.shared then  -- the ledger decides, with every cluster's commitments and its own balance
    line = ask_ledger(account, need, totals)
    local b, here, there = tostring(line or ""):match("^refused (%-?%d+) (%d+) (%d+)$")
    local wait = tonumber(tostring(line or ""):match("^wait (%d+)$"))
    if trial and (wait or line == "ok") then ask_ledger(account, ZERO, totals) end  -- it counted a trial: undo
    if wait then  -- the ledger counts it now, as a pending job of this cluster
      wait_for_credits(job_desc, account, wait)
      remember(trial, account, need)
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
    if not trial then note_refusal(account, submit_uid or -1, need, left) end
    local where = elsewhere and string.format(
      " across the clusters that share its budget (balance %s, minus %s for its pending and starting GPU jobs" ..
      " here and %s for those on the other clusters)", fmt(balance), fmt(pending), fmt(elsewhere))
      or string.format(" (balance %s, minus %s for its pending and starting GPU jobs)", fmt(balance), fmt(pending))
    slurm.log_user(string.format(
      "slurm-yolo: account %s cannot cover this job: its worst case is %s tokens (%s%s), the account has %s left%s",
      account, fmt(need), why, tasks > 1 and string.format(" x %d array tasks", tasks) or "", fmt(left), where))
    return slurm.ESLURM_ACCOUNTING_POLICY or slurm.ERROR
  end
  remember(trial, account, need)
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 or modify_uid == slurm_user_id then return slurm.SUCCESS end
  local why = modify_refusal(job_desc, job_rec)
  if why == nil then return slurm.SUCCESS end
  slurm.log_user(why)  -- scontrol shows no job_modify message: the user reads "Access/permission denied"
  return slurm.ESLURM_ACCESS_DENIED or slurm.ERROR
end

slurm_user_id = tonumber("@SLURM_UID@") or -1

