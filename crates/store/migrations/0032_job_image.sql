-- Gantry store schema, version 32 (issue 40): the container image a job runs in (JSON: ref and,
-- once resolved, digest).
ALTER TABLE jobs ADD COLUMN image TEXT;
