"""The billing policy as pure functions: what a run holds, pays and refunds (job_submit.lua mirrors it)."""
