-- Gantry store schema, version 30 (PostgreSQL; see ../0030_service_activity.sql): what each
-- server replica's gateway last saw of a service, for the leader's autoscaler.
CREATE TABLE service_activity (
    team TEXT NOT NULL,
    service TEXT NOT NULL,
    replica TEXT NOT NULL,
    last_request_at BIGINT NOT NULL,
    held BIGINT NOT NULL,
    in_flight BIGINT NOT NULL DEFAULT 0,
    queue_length BIGINT NOT NULL DEFAULT 0,
    rps DOUBLE PRECISION NOT NULL DEFAULT 0,
    at BIGINT NOT NULL,
    PRIMARY KEY (team, service, replica)
);
