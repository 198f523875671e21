-- Gantry store schema, version 8: gang jobs. A gang is one job row (the one users submit, cancel and
-- read) with `replicas` > 1, plus one row per worker (`gang_id` = the gang's id, `rank` 0..replicas).
-- Workers are placed, run and reported like any job; the gang's state follows theirs. The
-- rendezvous (`local_rank`, `master_addr`, `master_port`) is written when the gang is placed.
ALTER TABLE jobs ADD COLUMN replicas INTEGER NOT NULL DEFAULT 1;
ALTER TABLE jobs ADD COLUMN gang_id INTEGER REFERENCES jobs(id);
ALTER TABLE jobs ADD COLUMN rank INTEGER;
ALTER TABLE jobs ADD COLUMN local_rank INTEGER;
ALTER TABLE jobs ADD COLUMN master_addr TEXT;
ALTER TABLE jobs ADD COLUMN master_port INTEGER;
CREATE INDEX jobs_by_gang ON jobs(gang_id, rank);
