-- Gantry store schema, version 35 (issue 38): volumes, a team's directories that outlive its
-- jobs, shared (`path`) or on one node (`node`); and the volumes each job mounts (JSON).
CREATE TABLE volumes (
    team       TEXT NOT NULL,
    name       TEXT NOT NULL,
    path       TEXT,
    node       TEXT,
    size_bytes INTEGER,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (team, name)
);
ALTER TABLE jobs ADD COLUMN volumes TEXT;
