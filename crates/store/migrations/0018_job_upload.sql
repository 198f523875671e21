-- Gantry store schema, version 18 (issue 22): the working directory uploaded
-- with a job (JSON: digest, files, bytes) and the path on the node a job starts in instead
-- (`--chdir`).
ALTER TABLE jobs ADD COLUMN upload TEXT;
ALTER TABLE jobs ADD COLUMN chdir TEXT;
