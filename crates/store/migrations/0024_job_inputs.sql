-- Gantry store schema, version 24 (issue 22): a job's
-- declared inputs (JSON: name, url and, once staged, bytes, cache_hit, staged_s), the team
-- secret its S3 inputs are read with, and the teams' secrets (`gantry secret set`; `data` is a
-- JSON object of KEY: VALUE, never shown again).
ALTER TABLE jobs ADD COLUMN inputs TEXT;
ALTER TABLE jobs ADD COLUMN input_secret TEXT;
CREATE TABLE secrets (
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (team, name)
);
