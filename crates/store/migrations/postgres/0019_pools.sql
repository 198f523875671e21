-- Gantry store schema, version 19 (PostgreSQL; see ../0019_pools.sql): node labels, a job's
-- node selector, and pools; a change of a node's labels or of a pool is a change for the
-- scheduler.
ALTER TABLE nodes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN node_selector TEXT NOT NULL DEFAULT '{}';
CREATE TABLE pools (
    name TEXT PRIMARY KEY,
    placement TEXT NOT NULL DEFAULT 'pack',
    teams TEXT NOT NULL DEFAULT '[]',
    updated_at BIGINT NOT NULL
);

DROP TRIGGER scheduler_node_update ON nodes;
CREATE TRIGGER scheduler_node_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.epoch IS DISTINCT FROM NEW.epoch
       OR OLD.hostname IS DISTINCT FROM NEW.hostname OR OLD.advertise_addr IS DISTINCT FROM NEW.advertise_addr
       OR OLD.cpu_milli IS DISTINCT FROM NEW.cpu_milli OR OLD.memory_mib IS DISTINCT FROM NEW.memory_mib
       OR OLD.scheduling IS DISTINCT FROM NEW.scheduling OR OLD.drain_at IS DISTINCT FROM NEW.drain_at
       OR OLD.labels IS DISTINCT FROM NEW.labels)
    EXECUTE FUNCTION scheduler_cluster_changed();
CREATE TRIGGER scheduler_pool AFTER INSERT OR UPDATE ON pools
    FOR EACH ROW EXECUTE FUNCTION scheduler_cluster_changed();
