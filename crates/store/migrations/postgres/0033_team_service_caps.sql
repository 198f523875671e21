-- Gantry store schema, version 33 (PostgreSQL; see ../0033_team_service_caps.sql): how many
-- services and service replicas a team may hold.
ALTER TABLE teams ADD COLUMN max_services BIGINT;
ALTER TABLE teams ADD COLUMN max_replicas BIGINT;
