-- Gantry store schema, version 10 (PostgreSQL; see ../0010_scheduler_changes.sql): the
-- scheduler's change log, kept by triggers in the transaction of every write that can change
-- what the scheduler sees. `seq` must be gap-free and in commit order (a reader that sees a gap
-- reloads everything; one that missed a row would never learn of it): a sequence is neither
-- (values of rolled-back transactions are lost, concurrent ones commit out of order), so `seq`
-- comes from a counter row whose lock is held until the writing transaction ends.
ALTER TABLE nodes ADD COLUMN advertise_addr TEXT;
CREATE TABLE scheduler_changes (
    seq    BIGINT PRIMARY KEY,
    job_id BIGINT
);
CREATE TABLE scheduler_seq (
    one BIGINT PRIMARY KEY CHECK (one = 1),
    seq BIGINT NOT NULL
);
INSERT INTO scheduler_seq (one, seq) VALUES (1, 0);

CREATE FUNCTION scheduler_change(job BIGINT) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    next BIGINT;
BEGIN
    UPDATE scheduler_seq SET seq = seq + 1 WHERE one = 1 RETURNING seq INTO next;
    INSERT INTO scheduler_changes (seq, job_id) VALUES (next, job);
    -- The log keeps its newest 100,000 rows at least (pruned every 1,000).
    IF next % 1000 = 0 THEN
        DELETE FROM scheduler_changes WHERE seq <= next - 100000;
    END IF;
END $$;

CREATE FUNCTION scheduler_job_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN PERFORM scheduler_change(OLD.id); ELSE PERFORM scheduler_change(NEW.id); END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION scheduler_allocation_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN PERFORM scheduler_change(OLD.job_id); ELSE PERFORM scheduler_change(NEW.job_id); END IF;
    RETURN NULL;
END $$;
CREATE FUNCTION scheduler_cluster_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM scheduler_change(NULL);
    RETURN NULL;
END $$;

CREATE TRIGGER scheduler_job AFTER INSERT OR UPDATE OR DELETE ON jobs
    FOR EACH ROW EXECUTE FUNCTION scheduler_job_changed();
CREATE TRIGGER scheduler_allocation AFTER INSERT OR UPDATE OR DELETE ON allocations
    FOR EACH ROW EXECUTE FUNCTION scheduler_allocation_changed();

-- A heartbeat rewrites `last_heartbeat` and every GPU's sample: not a change for the scheduler.
CREATE TRIGGER scheduler_node_insert AFTER INSERT OR DELETE ON nodes
    FOR EACH ROW EXECUTE FUNCTION scheduler_cluster_changed();
CREATE TRIGGER scheduler_node_update AFTER UPDATE ON nodes FOR EACH ROW
    WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.epoch IS DISTINCT FROM NEW.epoch
       OR OLD.hostname IS DISTINCT FROM NEW.hostname OR OLD.advertise_addr IS DISTINCT FROM NEW.advertise_addr
       OR OLD.cpu_milli IS DISTINCT FROM NEW.cpu_milli OR OLD.memory_mib IS DISTINCT FROM NEW.memory_mib)
    EXECUTE FUNCTION scheduler_cluster_changed();

CREATE TRIGGER scheduler_gpu_insert AFTER INSERT OR DELETE ON gpus
    FOR EACH ROW EXECUTE FUNCTION scheduler_cluster_changed();
CREATE TRIGGER scheduler_gpu_update AFTER UPDATE ON gpus FOR EACH ROW
    WHEN (OLD.health IS DISTINCT FROM NEW.health OR OLD.node_id IS DISTINCT FROM NEW.node_id
       OR OLD.idx IS DISTINCT FROM NEW.idx OR OLD.model IS DISTINCT FROM NEW.model
       OR OLD.memory_mib IS DISTINCT FROM NEW.memory_mib)
    EXECUTE FUNCTION scheduler_cluster_changed();

CREATE TRIGGER scheduler_team AFTER INSERT OR UPDATE OR DELETE ON teams
    FOR EACH ROW EXECUTE FUNCTION scheduler_cluster_changed();
