-- Gantry store schema, version 28: the database moves the audit chain's head as it takes
-- each row (the store no longer writes the head itself). A row must still follow the head
-- (migration 20); once in, it is the head. So several rows appended in one statement (the
-- PostgreSQL store's batched submissions) each follow the one before.
CREATE TRIGGER audit_moves_head AFTER INSERT ON audit
BEGIN
    INSERT OR REPLACE INTO audit_head (one, last_id, last_hash) VALUES (1, NEW.id, NEW.hash);
END;
