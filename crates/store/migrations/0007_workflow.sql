-- Gantry store schema, version 7: the batch workflow (arrays, dependencies, labels, GPU models,
-- work directories) and GPU time actually used.
ALTER TABLE jobs ADD COLUMN array_id INTEGER;           -- the array's id (its first member's), NULL: none
ALTER TABLE jobs ADD COLUMN array_index INTEGER;
ALTER TABLE jobs ADD COLUMN array_max_running INTEGER;  -- NULL: no limit
ALTER TABLE jobs ADD COLUMN after TEXT NOT NULL DEFAULT '[]';       -- JSON [{kind, job}]
ALTER TABLE jobs ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';      -- JSON {key: value}
ALTER TABLE jobs ADD COLUMN gpu_models TEXT NOT NULL DEFAULT '[]';  -- JSON [name]
ALTER TABLE jobs ADD COLUMN workdir TEXT;
CREATE INDEX jobs_by_array ON jobs(array_id) WHERE array_id IS NOT NULL;

-- When each GPU's utilisation was last sampled (the start of the next interval it accounts for).
ALTER TABLE gpus ADD COLUMN used_sampled_at INTEGER;

-- GPU time used per allocation and hour: utilisation x share x time, milli-GPU-ms.
CREATE TABLE gpu_use (
    allocation_id INTEGER NOT NULL REFERENCES allocations(id),
    hour          INTEGER NOT NULL,   -- ms since the epoch / 3 600 000
    used_milli_ms INTEGER NOT NULL,
    PRIMARY KEY (allocation_id, hour)
) WITHOUT ROWID;
CREATE INDEX gpu_use_by_hour ON gpu_use(hour);
