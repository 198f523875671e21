-- Gantry store schema, version 3 (PostgreSQL; see ../0003_job_env.sql).
ALTER TABLE jobs ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
