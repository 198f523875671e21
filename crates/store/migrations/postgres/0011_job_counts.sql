-- Gantry store schema, version 11 (PostgreSQL; see ../0011_job_counts.sql): the job gauges'
-- counts per (team, state), a gang counting once, kept by triggers in the writing transaction.
CREATE TABLE job_counts (
    team  TEXT NOT NULL,
    state TEXT NOT NULL,
    n     BIGINT NOT NULL,
    PRIMARY KEY (team, state)
);

INSERT INTO job_counts (team, state, n)
SELECT team, state, COUNT(*) FROM jobs WHERE gang_id IS NULL GROUP BY team, state;

CREATE FUNCTION job_counts_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF OLD.gang_id IS NULL THEN
            UPDATE job_counts SET n = n - 1 WHERE team = OLD.team AND state = OLD.state;
            DELETE FROM job_counts WHERE team = OLD.team AND state = OLD.state AND n <= 0;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NEW.gang_id IS NULL THEN
            INSERT INTO job_counts (team, state, n) VALUES (NEW.team, NEW.state, 1)
            ON CONFLICT (team, state) DO UPDATE SET n = job_counts.n + 1;
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER job_counts_insert AFTER INSERT OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION job_counts_changed();
CREATE TRIGGER job_counts_update AFTER UPDATE OF team, state, gang_id ON jobs FOR EACH ROW
    WHEN (OLD.team IS DISTINCT FROM NEW.team OR OLD.state IS DISTINCT FROM NEW.state
       OR OLD.gang_id IS DISTINCT FROM NEW.gang_id)
    EXECUTE FUNCTION job_counts_changed();
