-- Gantry store schema, version 31 (issues 19 and 21: services on several server replicas): each
-- replica's gateway also shares the times to first byte it measured for a service, so that the
-- leader's autoscaler reads a `ttft_p95` over every replica's requests, not its own alone. A JSON
-- array of [bucket, count] pairs of a logarithmic histogram (the server's
-- `gateway::histogram`: bucket b holds times up to 1 ms × 2^(b/4)); `[]` when none was measured.
ALTER TABLE service_activity ADD COLUMN ttft_histogram TEXT NOT NULL DEFAULT '[]';
