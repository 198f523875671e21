-- Gantry store schema, version 24 (PostgreSQL; see ../0024_job_inputs.sql): a
-- job's declared inputs, its input secret, and the teams' secrets.
ALTER TABLE jobs ADD COLUMN inputs TEXT;
ALTER TABLE jobs ADD COLUMN input_secret TEXT;
CREATE TABLE secrets (
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    data TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (team, name)
);
