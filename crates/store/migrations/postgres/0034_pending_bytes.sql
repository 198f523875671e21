-- Gantry store schema, version 34 (PostgreSQL; see ../0034_pending_bytes.sql): the pending
-- limit counts bytes as well as jobs, kept in `job_counts.bytes` by the counts' trigger.
ALTER TABLE job_counts ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;

UPDATE job_counts SET bytes = COALESCE((
    SELECT SUM(octet_length(j.command) + octet_length(COALESCE(j.env, '')))
    FROM jobs j WHERE j.gang_id IS NULL AND j.team = job_counts.team AND j.state = job_counts.state), 0);

CREATE OR REPLACE FUNCTION job_counts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.gang_id IS NULL THEN
            UPDATE job_counts SET n = n - 1,
                bytes = bytes - octet_length(OLD.command) - octet_length(COALESCE(OLD.env, ''))
            WHERE team = OLD.team AND state = OLD.state;
            DELETE FROM job_counts WHERE team = OLD.team AND state = OLD.state AND n <= 0;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.gang_id IS NULL THEN
            INSERT INTO job_counts (team, state, n, bytes)
            VALUES (NEW.team, NEW.state, 1, octet_length(NEW.command) + octet_length(COALESCE(NEW.env, '')))
            ON CONFLICT (team, state) DO UPDATE SET n = job_counts.n + 1, bytes = job_counts.bytes + EXCLUDED.bytes;
        END IF;
    END IF;
    RETURN NULL;
END $$;

DROP TRIGGER job_counts_update ON jobs;
CREATE TRIGGER job_counts_update AFTER UPDATE OF team, state, gang_id, command, env ON jobs FOR EACH ROW
    WHEN (OLD.team IS DISTINCT FROM NEW.team OR OLD.state IS DISTINCT FROM NEW.state
       OR OLD.gang_id IS DISTINCT FROM NEW.gang_id OR OLD.command IS DISTINCT FROM NEW.command
       OR OLD.env IS DISTINCT FROM NEW.env)
    EXECUTE FUNCTION job_counts_changed();

-- A team's own limit on those bytes (NULL: the server's default).
ALTER TABLE teams ADD COLUMN pending_bytes_limit BIGINT;
