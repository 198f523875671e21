-- Gantry store schema, version 33 (issue 37): how many services and service replicas a team may
-- hold (NULL: the server's defaults).
ALTER TABLE teams ADD COLUMN max_services INTEGER;
ALTER TABLE teams ADD COLUMN max_replicas INTEGER;
