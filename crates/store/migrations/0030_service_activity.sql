-- Gantry store schema, version 30 (issues 19 and 21: services on several server replicas): what
-- each replica's gateway last saw of a service, so that the leader's autoscaler, which runs on
-- one replica, counts the requests that went through the others' gateways: a service used only
-- through a follower does not scale to zero, a request a follower holds for a service at zero
-- starts it, and the load through a follower counts in the autoscaler's metrics. One row per
-- (service, replica), rewritten as the replica sees requests.
CREATE TABLE service_activity (
    team TEXT NOT NULL,
    service TEXT NOT NULL,
    replica TEXT NOT NULL,
    -- ms since the epoch: the last request this replica's gateway answered, forwarded or held.
    last_request_at INTEGER NOT NULL,
    -- Requests it holds for a ready replica now (a cold start), as of `at`.
    held INTEGER NOT NULL,
    -- Its gateway's serving signals for the service as of `at`: requests sent to replicas and
    -- not yet answered, requests in its queue, requests per second arriving.
    in_flight INTEGER NOT NULL DEFAULT 0,
    queue_length INTEGER NOT NULL DEFAULT 0,
    rps REAL NOT NULL DEFAULT 0,
    at INTEGER NOT NULL,
    PRIMARY KEY (team, service, replica)
);
