-- Gantry store schema, version 14 (PostgreSQL; see ../0014_team_priority.sql).
ALTER TABLE teams ADD COLUMN max_priority BIGINT;
ALTER TABLE teams ADD COLUMN preempt_other_teams BIGINT;
