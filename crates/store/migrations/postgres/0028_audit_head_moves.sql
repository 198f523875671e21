-- Gantry store schema, version 28 (PostgreSQL; see ../0028_audit_head_moves.sql): the
-- database moves the audit chain's head as it takes each row (the store no longer writes the
-- head itself). The check of migration 20 stays as it was: the head's row is locked, and the
-- row must be the next id linked to the head's hash; then the row is the head. In the BEFORE
-- trigger, so that rows appended by one statement (the batched submissions) each follow the
-- one before: a row's trigger sees what the previous row's trigger wrote.
CREATE OR REPLACE FUNCTION audit_follows_head() RETURNS trigger LANGUAGE plpgsql AS $$
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
    INSERT INTO audit_head (one, last_id, last_hash) VALUES (1, NEW.id, NEW.hash)
        ON CONFLICT (one) DO UPDATE SET last_id = EXCLUDED.last_id, last_hash = EXCLUDED.last_hash;
    RETURN NEW;
END $$;
