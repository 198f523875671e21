-- Gantry store schema, version 4: a job's time limit, seconds (NULL: none).
ALTER TABLE jobs ADD COLUMN time_limit_s INTEGER;
