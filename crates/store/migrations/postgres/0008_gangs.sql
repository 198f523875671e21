-- Gantry store schema, version 8 (PostgreSQL; see ../0008_gangs.sql): gang jobs.
ALTER TABLE jobs ADD COLUMN replicas BIGINT NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN gang_id BIGINT REFERENCES jobs(id);
ALTER TABLE jobs ADD COLUMN rank BIGINT;
ALTER TABLE jobs ADD COLUMN local_rank BIGINT;
ALTER TABLE jobs ADD COLUMN master_addr TEXT;
ALTER TABLE jobs ADD COLUMN master_port BIGINT;
CREATE INDEX jobs_by_gang ON jobs(gang_id, rank);
