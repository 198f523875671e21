-- Gantry store schema, version 22 (PostgreSQL; see ../0022_idle_policies.sql): a team's idle
-- policy per job kind.
CREATE TABLE idle_policies (
    team TEXT NOT NULL,
    kind TEXT NOT NULL,
    warn_after_s BIGINT NOT NULL,
    act_after_s BIGINT NOT NULL,
    below_percent DOUBLE PRECISION NOT NULL,
    action TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (team, kind)
);
