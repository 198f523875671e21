-- Gantry store schema, version 22 (issue 23.2: idle GPUs): a team's idle policy per job kind (`gantry team idle TEAM --kind batch …`, admins):
-- warn after `warn_after_s` below `below_percent` utilisation on every GPU of a job, then after
-- `act_after_s` take `action` (`requeue` or `cancel`). A team without a row for a kind gets the
-- built-in default (batch: warn at 60 min, requeue at 120 min below 1 %).
CREATE TABLE idle_policies (
    team TEXT NOT NULL,
    kind TEXT NOT NULL,
    warn_after_s INTEGER NOT NULL,
    act_after_s INTEGER NOT NULL,
    below_percent REAL NOT NULL,
    action TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (team, kind)
);
