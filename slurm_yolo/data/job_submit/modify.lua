-- Why a user's change to a pending job is refused (nil: it is not). A pending job's GPUs, nodes,
-- partition, account, QOS, array, limit and begin time are what admission priced: a user changes
-- them by resubmitting (admins and the SlurmUser may still update them).
local function modify_refusal(job_desc, job_rec)
  if job_rec.comment == TRIAL_MARK then  -- a real job with yolo-sbatch's trial mark stays held (state.lua)
    return "slurm-yolo: this job carries yolo-sbatch's trial mark (--comment=" .. TRIAL_MARK .. "): it was" ..
           " held at submission and stays so; cancel it and submit it without that comment"
  end
  local fields = {"tres_per_node", "tres_per_job", "tres_per_task", "tres_per_socket", "gres",
                  "partition", "account", "qos", "array_inx"}
  for _, name in ipairs(fields) do
    if job_desc[name] ~= nil then
      return "slurm-yolo: " .. name .. " of a submitted job cannot change (its budget " ..
             "was checked at submission): cancel and resubmit"
    end
  end
  local limit, was = job_desc.time_limit, job_rec.time_limit
  if limit == 0 then  -- a run with limit 0 holds nothing while slurmctld takes its time to end it
    return "slurm-yolo: a submitted job's time limit cannot be set to 0: cancel it instead"
  end
  if limit ~= nil and limit ~= NO_VAL and (was == nil or was == NO_VAL or limit > was) then
    return "slurm-yolo: a submitted job's time limit can only be lowered (its budget was checked" ..
           " at submission): cancel and resubmit"
  end
  local begin, began = job_desc.begin_time, job_rec.begin_time
  if valid(begin) and begin ~= 0 and (not valid(began) or begin < began) then
    -- a job that waits for credits waits for its begin time alone: earlier, it would start uncovered
    return "slurm-yolo: a submitted job's begin time can only move later (it may be waiting for" ..
                   " its account's credits): cancel and resubmit"
  end
  for _, name in ipairs({"min_nodes", "max_nodes", "num_tasks", "ntasks_per_node", "shared"}) do
    if valid(job_desc[name]) then
      return "slurm-yolo: " .. name .. " of a submitted job cannot change (its budget " ..
             "was checked at submission): cancel and resubmit"
    end
  end
  return nil
end
