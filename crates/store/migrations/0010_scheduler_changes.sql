-- Gantry store schema, version 10: the scheduler's change log. Every write that can change what
-- the scheduler sees appends a row in the same transaction (triggers, so that no write path can
-- forget it): `job_id` for a job (or its allocations), NULL for the cluster (a node joining,
-- lost or registered again, a GPU's health, a team's quota). The scheduler keeps its queue in
-- memory and reads `WHERE seq > last`; one writer and AUTOINCREMENT make `seq` gap-free, so a
-- gap means the log was pruned past the reader, which then reloads everything.
-- Also: the address a node advertises to its peers (`gantry agent --advertise-addr`), which gang
-- workers get as MASTER_ADDR instead of its host name.
ALTER TABLE nodes ADD COLUMN advertise_addr TEXT;
CREATE TABLE scheduler_changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id INTEGER
);

CREATE TRIGGER scheduler_job_insert AFTER INSERT ON jobs
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NEW.id); END;
CREATE TRIGGER scheduler_job_update AFTER UPDATE ON jobs
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NEW.id); END;
CREATE TRIGGER scheduler_job_delete AFTER DELETE ON jobs
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (OLD.id); END;

CREATE TRIGGER scheduler_allocation_insert AFTER INSERT ON allocations
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NEW.job_id); END;
CREATE TRIGGER scheduler_allocation_update AFTER UPDATE ON allocations
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NEW.job_id); END;
CREATE TRIGGER scheduler_allocation_delete AFTER DELETE ON allocations
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (OLD.job_id); END;

-- A heartbeat rewrites `last_heartbeat` and every GPU's sample: not a change for the scheduler.
CREATE TRIGGER scheduler_node_insert AFTER INSERT ON nodes
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_node_update AFTER UPDATE ON nodes
WHEN OLD.state IS NOT NEW.state OR OLD.epoch IS NOT NEW.epoch OR OLD.hostname IS NOT NEW.hostname
  OR OLD.advertise_addr IS NOT NEW.advertise_addr
  OR OLD.cpu_milli IS NOT NEW.cpu_milli OR OLD.memory_mib IS NOT NEW.memory_mib
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_node_delete AFTER DELETE ON nodes
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;

CREATE TRIGGER scheduler_gpu_insert AFTER INSERT ON gpus
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_gpu_update AFTER UPDATE ON gpus
WHEN OLD.health IS NOT NEW.health OR OLD.node_id IS NOT NEW.node_id OR OLD.idx IS NOT NEW.idx
  OR OLD.model IS NOT NEW.model OR OLD.memory_mib IS NOT NEW.memory_mib
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_gpu_delete AFTER DELETE ON gpus
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;

CREATE TRIGGER scheduler_team_insert AFTER INSERT ON teams
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_team_update AFTER UPDATE ON teams
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;
CREATE TRIGGER scheduler_team_delete AFTER DELETE ON teams
BEGIN INSERT INTO scheduler_changes (job_id) VALUES (NULL); END;

-- The log keeps its newest 100,000 rows at least (pruned every 1,000).
CREATE TRIGGER scheduler_changes_prune AFTER INSERT ON scheduler_changes WHEN NEW.seq % 1000 = 0
BEGIN DELETE FROM scheduler_changes WHERE seq <= NEW.seq - 100000; END;
