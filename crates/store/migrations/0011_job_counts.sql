-- Gantry store schema, version 11: the job gauges' counts, kept by triggers. `job_counts` holds,
-- per (team, state), how many jobs are in that state, a gang counting once (its workers, rows
-- with a `gang_id`, do not count) — what `SELECT team, state, COUNT(*) FROM jobs WHERE gang_id
-- IS NULL GROUP BY team, state` gives, without reading every job every 250 ms. The triggers run
-- in the transaction of the write, so the counts are exact at every commit; a row whose count
-- fell to 0 is removed.
CREATE TABLE job_counts (
    team  TEXT NOT NULL,
    state TEXT NOT NULL,
    n     INTEGER NOT NULL,
    PRIMARY KEY (team, state)
) WITHOUT ROWID;

INSERT INTO job_counts (team, state, n)
SELECT team, state, COUNT(*) FROM jobs WHERE gang_id IS NULL GROUP BY team, state;

CREATE TRIGGER job_counts_insert AFTER INSERT ON jobs WHEN NEW.gang_id IS NULL
BEGIN
    INSERT INTO job_counts (team, state, n) VALUES (NEW.team, NEW.state, 1)
    ON CONFLICT (team, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER job_counts_update AFTER UPDATE OF team, state, gang_id ON jobs
WHEN OLD.team IS NOT NEW.team OR OLD.state IS NOT NEW.state OR OLD.gang_id IS NOT NEW.gang_id
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE OLD.gang_id IS NULL AND team = OLD.team AND state = OLD.state;
    DELETE FROM job_counts WHERE n <= 0;
    INSERT INTO job_counts (team, state, n) SELECT NEW.team, NEW.state, 1 WHERE NEW.gang_id IS NULL
    ON CONFLICT (team, state) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER job_counts_delete AFTER DELETE ON jobs WHEN OLD.gang_id IS NULL
BEGIN
    UPDATE job_counts SET n = n - 1 WHERE team = OLD.team AND state = OLD.state;
    DELETE FROM job_counts WHERE n <= 0;
END;
