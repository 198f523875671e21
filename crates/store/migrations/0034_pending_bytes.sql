-- Gantry store schema, version 34 (issue 37): the pending limit counts bytes as well as jobs.
-- `job_counts.bytes` is, per (team, state), the bytes of the command and environment the
-- counted jobs store (a gang once, its workers not), kept by the same triggers as `n`, so that
-- a submission's room is read in its own transaction without reading the jobs (a pending job
-- replaced by `gantry apply` changes its bytes too).
ALTER TABLE job_counts ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;

UPDATE job_counts SET bytes = COALESCE((
    SELECT SUM(length(CAST(j.command AS BLOB)) + length(CAST(COALESCE(j.env, '') AS BLOB)))
    FROM jobs j WHERE j.gang_id IS NULL AND j.team = job_counts.team AND j.state = job_counts.state), 0);

DROP TRIGGER job_counts_insert;
DROP TRIGGER job_counts_update;
DROP TRIGGER job_counts_delete;

CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs WHEN NEW.gang_id IS NULL
BEGIN
    INSERT INTO job_counts (team, state, n, bytes) VALUES (NEW.team, NEW.state, 1,
        length(CAST(NEW.command AS BLOB)) + length(CAST(COALESCE(NEW.env, '') AS BLOB)))
    ON CONFLICT (team, state) DO UPDATE SET n = n + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER job_counts_update AFTER UPDATE OF team, state, gang_id, command, env ON jobs
WHEN OLD.team IS NOT NEW.team OR OLD.state IS NOT NEW.state OR OLD.gang_id IS NOT NEW.gang_id
    OR OLD.command IS NOT NEW.command OR OLD.env IS NOT NEW.env
BEGIN
    UPDATE job_counts SET n = n - 1,
        bytes = bytes - length(CAST(OLD.command AS BLOB)) - length(CAST(COALESCE(OLD.env, '') AS BLOB))
    WHERE OLD.gang_id IS NULL AND team = OLD.team AND state = OLD.state;
    DELETE FROM job_counts WHERE n <= 0;
    INSERT INTO job_counts (team, state, n, bytes) SELECT NEW.team, NEW.state, 1,
        length(CAST(NEW.command AS BLOB)) + length(CAST(COALESCE(NEW.env, '') AS BLOB))
    WHERE NEW.gang_id IS NULL
    ON CONFLICT (team, state) DO UPDATE SET n = n + 1, bytes = bytes + excluded.bytes;
END;

CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs WHEN OLD.gang_id IS NULL
BEGIN
    UPDATE job_counts SET n = n - 1,
        bytes = bytes - length(CAST(OLD.command AS BLOB)) - length(CAST(COALESCE(OLD.env, '') AS BLOB))
    WHERE team = OLD.team AND state = OLD.state;
    DELETE FROM job_counts WHERE n <= 0;
END;

-- A team's own limit on those bytes (NULL: the server's default).
ALTER TABLE teams ADD COLUMN pending_bytes_limit INTEGER;
