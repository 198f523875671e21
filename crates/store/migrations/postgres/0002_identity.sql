-- Gantry store schema, version 2 (PostgreSQL; see ../0002_identity.sql): users in teams, scoped
-- tokens, node credentials, the audit log. `user` is a reserved word here: always quoted.
CREATE TABLE users (
    name        TEXT PRIMARY KEY,
    role        TEXT NOT NULL,
    created_at  BIGINT NOT NULL
);

CREATE TABLE user_teams (
    "user"      TEXT NOT NULL REFERENCES users(name),
    team        TEXT NOT NULL,
    PRIMARY KEY ("user", team)
);

ALTER TABLE tokens ADD COLUMN kind TEXT NOT NULL DEFAULT 'api';
ALTER TABLE tokens ADD COLUMN "user" TEXT REFERENCES users(name);
ALTER TABLE tokens ADD COLUMN node TEXT;
ALTER TABLE tokens ADD COLUMN expires_at BIGINT;
ALTER TABLE tokens ADD COLUMN revoked_at BIGINT;
ALTER TABLE tokens ADD COLUMN used_at BIGINT;

INSERT INTO users (name, role, created_at)
    SELECT 'admin', 'admin', MIN(created_at) FROM tokens WHERE role = 'admin' HAVING COUNT(*) > 0
    ON CONFLICT DO NOTHING;
INSERT INTO users (name, role, created_at)
    SELECT team, 'member', MIN(created_at) FROM tokens WHERE role = 'user' AND team IS NOT NULL GROUP BY team
    ON CONFLICT DO NOTHING;
INSERT INTO user_teams ("user", team)
    SELECT DISTINCT team, team FROM tokens WHERE role = 'user' AND team IS NOT NULL
    ON CONFLICT DO NOTHING;
UPDATE tokens SET "user" = 'admin' WHERE role = 'admin';
UPDATE tokens SET "user" = team, role = 'member' WHERE role = 'user';
UPDATE tokens SET kind = 'node', revoked_at = created_at WHERE role = 'agent';
CREATE INDEX tokens_by_user ON tokens("user");

ALTER TABLE events ADD COLUMN team TEXT;

-- request_id becomes unique per team, not across teams.
ALTER TABLE jobs DROP CONSTRAINT jobs_request_id_key;
CREATE UNIQUE INDEX jobs_by_request ON jobs(team, request_id) WHERE request_id IS NOT NULL;
CREATE INDEX jobs_by_team ON jobs(team, id);

CREATE TABLE audit (
    id          BIGINT PRIMARY KEY,
    at          BIGINT NOT NULL,
    actor       TEXT NOT NULL,
    role        TEXT NOT NULL,
    team        TEXT,
    action      TEXT NOT NULL,
    target      TEXT NOT NULL,
    outcome     TEXT NOT NULL,
    peer        TEXT,
    prev_hash   TEXT NOT NULL,
    hash        TEXT NOT NULL
);
CREATE TABLE audit_head (
    one         BIGINT PRIMARY KEY CHECK (one = 1),
    last_id     BIGINT NOT NULL,
    last_hash   TEXT NOT NULL
);
