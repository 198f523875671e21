-- Gantry store schema, version 17 (issue 19: services):
-- a service is a team's named file of replicas behind the gateway. `spec` is the file as JSON,
-- `digest` what makes applying it again a no-op, `generation` counts changed applies (a rolling
-- update replaces replicas of older generations), `desired` is the count the controller keeps
-- (the autoscaler's last decision). Its decisions are kept, newest last, per service.
-- A replica is a job naming its service (`jobs.service`), of the generation it runs.
CREATE TABLE services (
    id          INTEGER PRIMARY KEY,
    team        TEXT NOT NULL,
    name        TEXT NOT NULL,
    spec        TEXT NOT NULL,
    digest      TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    desired     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    UNIQUE (team, name)
);

CREATE TABLE service_decisions (
    id          INTEGER PRIMARY KEY,
    service_id  INTEGER NOT NULL REFERENCES services(id) ON DELETE CASCADE,
    at          INTEGER NOT NULL,
    from_count  INTEGER NOT NULL,
    to_count    INTEGER NOT NULL,
    reason      TEXT NOT NULL
);
CREATE INDEX service_decisions_by_service ON service_decisions (service_id, id);

ALTER TABLE jobs ADD COLUMN service TEXT;
ALTER TABLE jobs ADD COLUMN service_generation INTEGER;
CREATE INDEX jobs_by_service ON jobs (team, service) WHERE service IS NOT NULL;

-- An invoke token (`kind = 'invoke'`) calls one service, `TEAM/NAME`, through the gateway.
ALTER TABLE tokens ADD COLUMN service TEXT;
