-- Gantry store schema, version 16: whether a node takes new work (`gantry node cordon|uncordon|
-- drain`), apart from its liveness, and when a drain stops its running jobs (ms). A change of
-- either is a change for the scheduler.
ALTER TABLE nodes ADD COLUMN scheduling TEXT NOT NULL DEFAULT 'schedulable';
ALTER TABLE nodes ADD COLUMN drain_at INTEGER;

DROP TRIGGER scheduler_node_update;
CREATE TRIGGER scheduler_node_update AFTER UPDATE ON nodes
WHEN OLD.state IS NOT NEW.state OR OLD.epoch IS NOT NEW.epoch OR OLD.hostname IS NOT NEW.hostname
  OR OLD.advertise_addr IS NOT NEW.advertise_addr
  OR OLD.cpu_milli IS NOT NEW.cpu_milli OR OLD.memory_mib IS NOT NEW.memory_mib
  OR OLD.scheduling IS NOT NEW.scheduling OR OLD.drain_at IS NOT NEW.drain_at
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
