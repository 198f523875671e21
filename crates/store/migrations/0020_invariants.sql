-- Gantry store schema, version 20 (issue 21): the invariants the store's
-- rules keep, kept by the database too (postgres/0020_invariants.sql is the same change), so
-- that no writer (a bug, a hand-written UPDATE) can break them.

-- No GPU gives more than it has: an allocation must fit beside those held on its GPU.
CREATE TRIGGER allocations_fit BEFORE INSERT ON allocations
WHEN COALESCE((SELECT memory_mib FROM gpus WHERE uuid = NEW.gpu_uuid), -1) < 0
  OR NEW.share_milli + (SELECT COALESCE(SUM(share_milli), 0) FROM allocations
                        WHERE gpu_uuid = NEW.gpu_uuid AND released_at IS NULL) > 1000
  OR NEW.memory_mib + (SELECT COALESCE(SUM(memory_mib), 0) FROM allocations
                       WHERE gpu_uuid = NEW.gpu_uuid AND released_at IS NULL)
     > (SELECT memory_mib FROM gpus WHERE uuid = NEW.gpu_uuid)
BEGIN SELECT RAISE(ABORT, 'allocation refused: the gpu has no room left for it'); END;

-- A node's epoch never goes back: an agent of an older epoch stays fenced off.
CREATE TRIGGER nodes_epoch_grows BEFORE UPDATE OF epoch ON nodes WHEN NEW.epoch < OLD.epoch
BEGIN SELECT RAISE(ABORT, 'a node epoch cannot go back'); END;

-- An audit row follows the chain's head: the next id, linked to the head's hash.
CREATE TRIGGER audit_follows_head BEFORE INSERT ON audit
WHEN NEW.id <> COALESCE((SELECT last_id FROM audit_head WHERE one = 1), 0) + 1
  OR NEW.prev_hash <> COALESCE((SELECT last_hash FROM audit_head WHERE one = 1),
                               '0000000000000000000000000000000000000000000000000000000000000000')
BEGIN SELECT RAISE(ABORT, 'an audit row must follow the head of the chain'); END;
