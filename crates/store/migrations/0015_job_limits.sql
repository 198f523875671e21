-- A team's `pids.max` for each of its jobs (NULL: each node's default), and what a node holds a
-- job to that does not say (JSON `JobLimits`: default memory and CPU, `pids.max`; NULL: an
-- agent that does not tell).
ALTER TABLE teams ADD COLUMN pids_limit INTEGER;
ALTER TABLE nodes ADD COLUMN job_defaults TEXT;
