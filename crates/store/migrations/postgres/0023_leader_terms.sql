-- Gantry store schema, version 23 (branch ha2; PostgreSQL, see ../0023_leader_terms.sql): each
-- election's epoch, holder and time; each fenced placement's epoch and time of writing.
ALTER TABLE job_attempts ADD COLUMN leader_epoch BIGINT;
ALTER TABLE job_attempts ADD COLUMN recorded_at BIGINT;
CREATE TABLE leader_terms (
    epoch      BIGINT PRIMARY KEY,
    holder     TEXT NOT NULL,
    elected_at BIGINT NOT NULL
);
