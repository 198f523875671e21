-- Gantry store schema, version 21 (PostgreSQL; see ../0021_leader_lease.sql):
-- the leader's lease, its epoch the fencing token the leader's writes check.
CREATE TABLE leader_lease (
    one        BIGINT PRIMARY KEY CHECK (one = 1),
    holder     TEXT NOT NULL,
    epoch      BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE FUNCTION leader_epoch_grows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.epoch < OLD.epoch THEN
        RAISE EXCEPTION 'the leader epoch cannot go back (% to %)', OLD.epoch, NEW.epoch
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER leader_epoch_grows BEFORE UPDATE OF epoch ON leader_lease
    FOR EACH ROW EXECUTE FUNCTION leader_epoch_grows();
