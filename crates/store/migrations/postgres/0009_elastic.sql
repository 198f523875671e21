-- Gantry store schema, version 9 (PostgreSQL; see ../0009_elastic.sql): elastic jobs.
ALTER TABLE jobs ADD COLUMN gpus_max BIGINT;
