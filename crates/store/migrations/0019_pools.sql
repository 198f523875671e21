-- Gantry store schema, version 19 (issue 23.3: node pools):
-- the labels a node's agent declares (`gantry agent --label pool=inference`), the
-- node selector of a job (its pool folded in as `pool=NAME`), and each pool's placement
-- (`pack` or `spread`) and the teams that may use it (a JSON list; empty: every team). A
-- change of a node's labels or of a pool is a change for the scheduler.
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN node_selector TEXT NOT NULL DEFAULT '{}';
CREATE TABLE pools (
    name TEXT PRIMARY KEY,
    placement TEXT NOT NULL DEFAULT 'pack',
    teams TEXT NOT NULL DEFAULT '[]',
    updated_at INTEGER NOT NULL
);

DROP TRIGGER scheduler_node_update;
CREATE TRIGGER scheduler_node_update AFTER UPDATE ON nodes
WHEN OLD.state IS NOT NEW.state OR OLD.epoch IS NOT NEW.epoch OR OLD.hostname IS NOT NEW.hostname
  OR OLD.advertise_addr IS NOT NEW.advertise_addr
  OR OLD.cpu_milli IS NOT NEW.cpu_milli OR OLD.memory_mib IS NOT NEW.memory_mib
  OR OLD.scheduling IS NOT NEW.scheduling OR OLD.drain_at IS NOT NEW.drain_at
  OR OLD.labels IS NOT NEW.labels
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_pool_insert AFTER INSERT ON pools
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_pool_update AFTER UPDATE ON pools
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
