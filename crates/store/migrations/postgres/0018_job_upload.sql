-- Gantry store schema, version 18 (PostgreSQL; see ../0018_job_upload.sql): a job's uploaded
-- working directory and its `--chdir`.
ALTER TABLE jobs ADD COLUMN upload TEXT;
ALTER TABLE jobs ADD COLUMN chdir TEXT;
