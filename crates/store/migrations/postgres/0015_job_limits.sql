-- Gantry store schema, version 15 (PostgreSQL; see ../0015_job_limits.sql).
ALTER TABLE teams ADD COLUMN pids_limit BIGINT;
ALTER TABLE nodes ADD COLUMN job_defaults TEXT;
