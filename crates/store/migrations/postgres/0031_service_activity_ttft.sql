-- Gantry store schema, version 31 (PostgreSQL; see ../0031_service_activity_ttft.sql): the times
-- to first byte each replica's gateway measured for a service, as [bucket, count] pairs.
ALTER TABLE service_activity ADD COLUMN ttft_histogram TEXT NOT NULL DEFAULT '[]';
