-- Gantry store schema, version 7 (PostgreSQL; see ../0007_workflow.sql): the batch workflow and
-- GPU time actually used.
ALTER TABLE jobs ADD COLUMN array_id BIGINT;
ALTER TABLE jobs ADD COLUMN array_index BIGINT;
ALTER TABLE jobs ADD COLUMN array_max_running BIGINT;
ALTER TABLE jobs ADD COLUMN after TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
ALTER TABLE jobs ADD COLUMN gpu_models TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN workdir TEXT;
CREATE INDEX jobs_by_array ON jobs(array_id) WHERE array_id IS NOT NULL;

ALTER TABLE gpus ADD COLUMN used_sampled_at BIGINT;

CREATE TABLE gpu_use (
    allocation_id BIGINT NOT NULL REFERENCES allocations(id),
    hour          BIGINT NOT NULL,
    used_milli_ms BIGINT NOT NULL,
    PRIMARY KEY (allocation_id, hour)
);
CREATE INDEX gpu_use_by_hour ON gpu_use(hour);
