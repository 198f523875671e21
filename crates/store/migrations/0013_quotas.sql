-- Gantry store schema, version 13: what a team may keep, refusals collapsed in the audit log,
-- and node credentials bound to their client certificate.
--
-- `teams.log_quota_bytes` caps the job output the server keeps for the team, and
-- `teams.pending_limit` the jobs it may have pending (each array member counts); NULL means the
-- server's default.
--
-- `audit.count` is how many refusals one row stands for: refusals from the same caller, for
-- the same action and reason, within one minute (UTC, from the row's `at`) add to the first
-- one's row instead of adding rows, so that a client sending refused requests in a loop cannot
-- grow the log faster than a row a minute per reason. The count is not part of the row's hash
-- (it grows after the row was chained); everything else about the row is.
ALTER TABLE teams ADD COLUMN log_quota_bytes INTEGER;
ALTER TABLE teams ADD COLUMN pending_limit INTEGER;
ALTER TABLE audit ADD COLUMN count INTEGER NOT NULL DEFAULT 1;
CREATE INDEX audit_by_caller ON audit (actor, action, at);

-- `tokens.cert_sha256`: for a node credential issued by a join over TLS, the SHA-256 of the
-- client certificate issued with it; the credential is accepted only on a connection that
-- presented that certificate. NULL: no certificate is required (plain HTTP on loopback).
ALTER TABLE tokens ADD COLUMN cert_sha256 TEXT;
