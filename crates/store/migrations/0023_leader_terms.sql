-- Gantry store schema, version 23 (branch ha2, issue 21; postgres/0023_leader_terms.sql is the
-- same change): the history the failover checker reads. Each election appends its epoch, the
-- replica elected and the database's clock when it took the lease (after locking the row); each
-- placement by a fenced leader stamps its attempt with the epoch it was written under and the
-- database's clock when it wrote it (after the fence check's read of the lease). A placement
-- whose epoch a later election had already replaced when it was written is a stale write.
ALTER TABLE job_attempts ADD COLUMN leader_epoch INTEGER;
ALTER TABLE job_attempts ADD COLUMN recorded_at INTEGER;
CREATE TABLE leader_terms (
    epoch      INTEGER PRIMARY KEY,
    holder     TEXT NOT NULL,
    elected_at INTEGER NOT NULL
);
