-- Gantry store schema, version 13 (PostgreSQL; see ../0013_quotas.sql).
ALTER TABLE teams ADD COLUMN log_quota_bytes BIGINT;
ALTER TABLE teams ADD COLUMN pending_limit BIGINT;
ALTER TABLE audit ADD COLUMN count BIGINT NOT NULL DEFAULT 1;
CREATE INDEX audit_by_caller ON audit (actor, action, at);
ALTER TABLE tokens ADD COLUMN cert_sha256 TEXT;
