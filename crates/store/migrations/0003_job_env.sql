-- Gantry store schema, version 3: a job's declared environment (JSON object of strings).
ALTER TABLE jobs ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
