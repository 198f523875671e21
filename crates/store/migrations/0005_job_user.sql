-- Gantry store schema, version 5: who submitted a job (the user of the token; NULL before v5).
ALTER TABLE jobs ADD COLUMN user TEXT;
CREATE INDEX allocations_by_time ON allocations(created_at);
