-- Gantry store schema, version 29 (PostgreSQL; see ../0029_job_outputs.sql): a job's declared
-- outputs and the team secret they are uploaded with.
ALTER TABLE jobs ADD COLUMN outputs TEXT;
ALTER TABLE jobs ADD COLUMN output_secret TEXT;
