-- Gantry store schema, version 32 (PostgreSQL; see ../0032_job_image.sql): the container image a
-- job runs in.
ALTER TABLE jobs ADD COLUMN image TEXT;
