-- Gantry store schema, version 16 (PostgreSQL; see ../0016_node_scheduling.sql).
ALTER TABLE nodes ADD COLUMN scheduling TEXT NOT NULL DEFAULT 'schedulable';
ALTER TABLE nodes ADD COLUMN drain_at BIGINT;

DROP TRIGGER scheduler_node_update ON nodes;
CREATE TRIGGER scheduler_node_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.epoch IS DISTINCT FROM NEW.epoch
       OR OLD.hostname IS DISTINCT FROM NEW.hostname OR OLD.advertise_addr IS DISTINCT FROM NEW.advertise_addr
       OR OLD.cpu_milli IS DISTINCT FROM NEW.cpu_milli OR OLD.memory_mib IS DISTINCT FROM NEW.memory_mib
       OR OLD.scheduling IS DISTINCT FROM NEW.scheduling OR OLD.drain_at IS DISTINCT FROM NEW.drain_at)
    EXECUTE FUNCTION scheduler_cluster_changed();
