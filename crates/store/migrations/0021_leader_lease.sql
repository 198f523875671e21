-- Gantry store schema, version 21 (issue 21; postgres/0021_leader_lease.sql
-- is the same change): leadership among replicas on one database. One row names the leader (a
-- replica's id), the epoch it leads under and until when (ms, the leader's clock). The epoch
-- grows at every election and is the fencing token: every write the leader's scheduler and
-- reconcilers make first checks, in its own transaction, that the row still names that leader
-- under that epoch, so a leader that lost its lease (paused, partitioned) commits nothing.
CREATE TABLE leader_lease (
    one        INTEGER PRIMARY KEY CHECK (one = 1),
    holder     TEXT NOT NULL,
    epoch      INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TRIGGER leader_epoch_grows BEFORE UPDATE OF epoch ON leader_lease WHEN NEW.epoch < OLD.epoch
BEGIN SELECT RAISE(ABORT, 'the leader epoch cannot go back'); END;
