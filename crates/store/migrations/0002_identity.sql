-- Gantry store schema, version 2: users in teams, scoped tokens, node credentials, the audit log.
-- Runs with foreign keys off (the jobs table is rebuilt); the migrator checks them afterwards.

-- Users: a token names a user; the user's role and teams decide what the token may do.
CREATE TABLE users (
    name        TEXT PRIMARY KEY,
    role        TEXT NOT NULL,         -- admin | operator | member | viewer
    created_at  INTEGER NOT NULL
);

CREATE TABLE user_teams (
    user        TEXT NOT NULL REFERENCES users(name),
    team        TEXT NOT NULL,
    PRIMARY KEY (user, team)
);

-- Tokens gain a kind, an owner, a node binding, an expiry and a revocation time.
--   api:  a user's bearer token (role and teams come from the user)
--   join: one-time, short-lived; an agent trades it for a node credential
--   node: an agent's credential, bound to one node id
ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'api';
ALTER TABLE tokens ADD COLUMN user TEXT REFERENCES users(name);
ALTER TABLE tokens ADD COLUMN node TEXT;
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN revoked_at INTEGER;
ALTER TABLE tokens ADD COLUMN used_at INTEGER;

-- Existing tokens: admins become the user `admin`; team tokens become a member user named after
-- the team; agent tokens were unbound and are revoked (agents join again with a join token).
INSERT OR IGNORE INTO users (name, role, created_at)
    SELECT 'admin', 'admin', MIN(created_at) FROM tokens WHERE role = 'admin' HAVING COUNT(*) > 0;
INSERT OR IGNORE INTO users (name, role, created_at)
    SELECT team, 'member', MIN(created_at) FROM tokens WHERE role = 'user' AND team IS NOT NULL GROUP BY team;
INSERT OR IGNORE INTO user_teams (user, team)
    SELECT DISTINCT team, team FROM tokens WHERE role = 'user' AND team IS NOT NULL;
UPDATE tokens SET user = 'admin' WHERE role = 'admin';
UPDATE tokens SET user = team, role = 'member' WHERE role = 'user';
UPDATE tokens SET kind = 'node', revoked_at = created_at WHERE role = 'agent';
CREATE INDEX tokens_by_user ON tokens(user);

-- Events may belong to a team (visible to its members); cluster events have none.
ALTER TABLE events ADD COLUMN team TEXT;

-- request_id becomes unique per team, not across teams: rebuild jobs without the column UNIQUE.
CREATE TABLE jobs_v2 (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    request_id      TEXT,
    team            TEXT NOT NULL,
    name            TEXT NOT NULL,
    priority        INTEGER NOT NULL,
    command         TEXT NOT NULL,
    gpus            INTEGER NOT NULL,
    gpu_memory_mib  INTEGER NOT NULL,
    gpu_compute_pct INTEGER NOT NULL,
    cpu_milli       INTEGER NOT NULL,
    memory_mib      INTEGER NOT NULL,
    state           TEXT NOT NULL,
    attempt         INTEGER NOT NULL DEFAULT 0,
    lost_runs       INTEGER NOT NULL DEFAULT 0,
    max_retries     INTEGER NOT NULL,
    stop            TEXT,
    node_id         TEXT,
    epoch           INTEGER,
    gpu_uuids       TEXT NOT NULL DEFAULT '[]',
    exit_code       INTEGER,
    reason          TEXT,
    submitted_at    INTEGER NOT NULL,
    started_at      INTEGER,
    finished_at     INTEGER
);
INSERT INTO jobs_v2 SELECT * FROM jobs;
DROP TABLE jobs;
ALTER TABLE jobs_v2 RENAME TO jobs;
CREATE UNIQUE INDEX jobs_by_request ON jobs(team, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX jobs_by_state ON jobs(state, priority, id);
CREATE INDEX jobs_by_node ON jobs(node_id, state);
CREATE INDEX jobs_by_team ON jobs(team, id);

-- The audit log: one row per mutation, appended in the same transaction as the change. Each row
-- carries the hash of the previous one, so an edited, removed or reordered row breaks the chain;
-- audit_head holds the last row's id and hash, so removing rows from the end is seen too.
CREATE TABLE audit (
    id          INTEGER PRIMARY KEY,
    at          INTEGER NOT NULL,
    actor       TEXT NOT NULL,         -- user name, `node:<id>` or `token:<id>`
    role        TEXT NOT NULL,
    team        TEXT,
    action      TEXT NOT NULL,         -- e.g. job.submit, token.revoke
    target      TEXT NOT NULL,
    outcome     TEXT NOT NULL,         -- ok | denied: … | error: …
    peer        TEXT,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE TABLE audit_head (
    one         INTEGER PRIMARY KEY CHECK (one = 1),
    last_id     INTEGER NOT NULL,
    last_hash   TEXT NOT NULL
);
