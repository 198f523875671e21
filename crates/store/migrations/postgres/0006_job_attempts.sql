-- Gantry store schema, version 6 (PostgreSQL; see ../0006_job_attempts.sql): one row per attempt.
CREATE TABLE job_attempts (
    job_id      BIGINT NOT NULL REFERENCES jobs(id),
    attempt     BIGINT NOT NULL,
    node_id     TEXT NOT NULL,
    gpu_uuids   TEXT NOT NULL DEFAULT '[]',
    placed_at   BIGINT NOT NULL,
    started_at  BIGINT,
    finished_at BIGINT,
    outcome     TEXT,
    exit_code   BIGINT,
    reason      TEXT,
    PRIMARY KEY (job_id, attempt)
);

ALTER TABLE job_transitions ADD COLUMN attempt BIGINT;

INSERT INTO job_attempts (job_id, attempt, node_id, gpu_uuids, placed_at, finished_at)
    SELECT job_id, attempt, MIN(node_id), CAST(json_agg(gpu_uuid) AS TEXT), MIN(created_at), MAX(released_at)
    FROM allocations GROUP BY job_id, attempt
    ON CONFLICT DO NOTHING;
