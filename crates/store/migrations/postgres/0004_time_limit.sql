-- Gantry store schema, version 4 (PostgreSQL; see ../0004_time_limit.sql).
ALTER TABLE jobs ADD COLUMN time_limit_s BIGINT;
