-- Gantry store schema, version 6: one row per attempt of a job (where it ran, when, how it
-- ended), and the attempt each state change belongs to. `gantry job <id>` shows them.
CREATE TABLE job_attempts (
    job_id      INTEGER NOT NULL REFERENCES jobs(id),
    attempt     INTEGER NOT NULL,
    node_id     TEXT NOT NULL,
    gpu_uuids   TEXT NOT NULL DEFAULT '[]',
    placed_at   INTEGER NOT NULL,
    started_at  INTEGER,             -- the agent reported its process running
    finished_at INTEGER,
    outcome     TEXT,                -- the job's state when the attempt ended (pending: requeued)
    exit_code   INTEGER,
    reason      TEXT,
    PRIMARY KEY (job_id, attempt)
);

-- NULL for changes outside any attempt (submission) and for those recorded before version 6.
ALTER TABLE job_transitions ADD COLUMN attempt INTEGER;

-- Attempts placed before version 6, as far as the allocation history tells (jobs without GPUs
-- left no allocation rows).
INSERT OR IGNORE INTO job_attempts (job_id, attempt, node_id, gpu_uuids, placed_at, finished_at)
    SELECT job_id, attempt, node_id, json_group_array(gpu_uuid), MIN(created_at), MAX(released_at)
    FROM allocations GROUP BY job_id, attempt;
