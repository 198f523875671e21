-- Gantry store schema, version 5 (PostgreSQL; see ../0005_job_user.sql).
ALTER TABLE jobs ADD COLUMN "user" TEXT;
CREATE INDEX allocations_by_time ON allocations(created_at);
