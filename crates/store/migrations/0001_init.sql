-- Gantry store schema, version 1.
-- Times are milliseconds since the Unix epoch, given by the caller (the store has no clock).

CREATE TABLE teams (
    name        TEXT PRIMARY KEY,
    gpu_quota   INTEGER            -- whole GPUs the team may hold while others wait; NULL = unlimited
);

CREATE TABLE tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    hash        TEXT NOT NULL UNIQUE,  -- hex SHA-256 of the bearer token; the token itself is never stored
    role        TEXT NOT NULL,         -- admin | user | agent
    team        TEXT,
    name        TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE nodes (
    id              TEXT PRIMARY KEY,
    hostname        TEXT NOT NULL,
    state           TEXT NOT NULL,     -- ready | lost
    epoch           INTEGER NOT NULL,  -- bumped on every registration; fences stale agents
    cpu_milli       INTEGER NOT NULL,
    memory_mib      INTEGER NOT NULL,
    last_heartbeat  INTEGER NOT NULL,
    registered_at   INTEGER NOT NULL
);

CREATE TABLE gpus (
    uuid        TEXT PRIMARY KEY,
    node_id     TEXT NOT NULL REFERENCES nodes(id),
    idx         INTEGER NOT NULL,
    model       TEXT NOT NULL,
    memory_mib  INTEGER NOT NULL,
    health      TEXT NOT NULL,         -- healthy | suspect | unhealthy | recovering
    sample      TEXT,                  -- latest sample as JSON
    updated_at  INTEGER NOT NULL
);

CREATE TABLE jobs (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id      TEXT UNIQUE,       -- client idempotency key: a retried submission is one job
    team            TEXT NOT NULL,
    name            TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    command         TEXT NOT NULL,     -- JSON array of argv
    gpus            INTEGER NOT NULL,
    gpu_memory_mib  INTEGER NOT NULL,  -- > 0 for a slice of one GPU
    gpu_compute_pct INTEGER NOT NULL,
    cpu_milli       INTEGER NOT NULL,
    memory_mib      INTEGER NOT NULL,
    state           TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,  -- placements so far
    lost_runs       INTEGER NOT NULL DEFAULT 0,  -- runs lost to node or GPU failures (the retry budget)
    max_retries     INTEGER NOT NULL,
    stop            TEXT,              -- cancel | requeue: asked of the agent, applied when it reports
    node_id         TEXT,
    epoch           INTEGER,
    gpu_uuids       TEXT NOT NULL DEFAULT '[]',
    exit_code       INTEGER,
    reason          TEXT,
    submitted_at    INTEGER NOT NULL,
    started_at      INTEGER,
    finished_at     INTEGER
);
CREATE INDEX jobs_by_state ON jobs(state, priority, id);
CREATE INDEX jobs_by_node ON jobs(node_id, state);

CREATE TABLE job_transitions (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      INTEGER NOT NULL REFERENCES jobs(id),
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    reason      TEXT,
    at          INTEGER NOT NULL
);
CREATE INDEX job_transitions_by_job ON job_transitions(job_id);

-- Allocation history: rows are never deleted. `released_after` is the highest allocation id that
-- existed when the row was released, so two rows overlapped iff the later one's id is greater than
-- the earlier one's `released_after` (or that is NULL: still held). No wall clock involved.
CREATE TABLE allocations (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id          INTEGER NOT NULL REFERENCES jobs(id),
    attempt         INTEGER NOT NULL,
    node_id         TEXT NOT NULL,
    epoch           INTEGER NOT NULL,
    gpu_uuid        TEXT NOT NULL,
    share_milli     INTEGER NOT NULL,
    memory_mib      INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    released_at     INTEGER,
    released_after  INTEGER
);
CREATE INDEX allocations_active ON allocations(gpu_uuid) WHERE released_at IS NULL;
CREATE INDEX allocations_by_job ON allocations(job_id);

CREATE TABLE events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       INTEGER NOT NULL,
    kind     TEXT NOT NULL,
    subject  TEXT NOT NULL,
    message  TEXT NOT NULL
);
