-- Gantry store schema, version 35 (PostgreSQL; see ../0035_volumes.sql): volumes, and the
-- volumes each job mounts.
CREATE TABLE volumes (
    team       TEXT NOT NULL,
    name       TEXT NOT NULL,
    path       TEXT,
    node       TEXT,
    size_bytes BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (team, name)
);
ALTER TABLE jobs ADD COLUMN volumes TEXT;
