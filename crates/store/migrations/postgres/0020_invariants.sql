-- Gantry store schema, version 20 (PostgreSQL; see ../0020_invariants.sql):
-- the invariants the store's rules keep, kept by the database too, so that
-- no writer (a second replica, a bug, a hand-written UPDATE) can break them.

-- No GPU gives more than it has: an allocation must fit beside those held on its GPU. The
-- GPU's row is locked first, so two transactions placing on one GPU at once take turns and the
-- second sees the first's allocation.
CREATE FUNCTION allocations_fit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    capacity BIGINT;
    share BIGINT;
    memory BIGINT;
BEGIN
    SELECT memory_mib INTO capacity FROM gpus WHERE uuid = NEW.gpu_uuid FOR UPDATE;
    SELECT COALESCE(SUM(share_milli), 0), COALESCE(SUM(memory_mib), 0) INTO share, memory
        FROM allocations WHERE gpu_uuid = NEW.gpu_uuid AND released_at IS NULL;
    IF capacity IS NULL OR share + NEW.share_milli > 1000 OR memory + NEW.memory_mib > capacity THEN
        RAISE EXCEPTION 'allocation refused: gpu % has no room left for job %', NEW.gpu_uuid, NEW.job_id
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER allocations_fit BEFORE INSERT ON allocations FOR EACH ROW EXECUTE FUNCTION allocations_fit();

-- A node's epoch never goes back: an agent of an older epoch stays fenced off.
CREATE FUNCTION nodes_epoch_grows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.epoch < OLD.epoch THEN
        RAISE EXCEPTION 'node % epoch % cannot go back to %', OLD.id, OLD.epoch, NEW.epoch
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER nodes_epoch_grows BEFORE UPDATE OF epoch ON nodes FOR EACH ROW EXECUTE FUNCTION nodes_epoch_grows();

-- An audit row follows the chain's head: the next id, linked to the head's hash.
CREATE FUNCTION audit_follows_head() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    head_id BIGINT;
    head_hash TEXT;
BEGIN
    SELECT last_id, last_hash INTO head_id, head_hash FROM audit_head WHERE one = 1 FOR UPDATE;
    IF NEW.id <> COALESCE(head_id, 0) + 1
       OR NEW.prev_hash <> COALESCE(head_hash, '0000000000000000000000000000000000000000000000000000000000000000') THEN
        RAISE EXCEPTION 'audit row % does not follow the head (row %)', NEW.id, COALESCE(head_id, 0)
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER audit_follows_head BEFORE INSERT ON audit FOR EACH ROW EXECUTE FUNCTION audit_follows_head();
