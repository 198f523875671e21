-- Gantry store schema, version 29 (issue 22, stage-out): a job's declared outputs (JSON: name,
-- url and, once an attempt has ended, state, bytes, files, skipped, uploaded_s, attempt, error)
-- and the team secret they are uploaded with.
ALTER TABLE jobs ADD COLUMN outputs TEXT;
ALTER TABLE jobs ADD COLUMN output_secret TEXT;
