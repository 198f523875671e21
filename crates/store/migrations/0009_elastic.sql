-- Gantry store schema, version 9: elastic jobs. `gpus` stays the fewest whole GPUs a job runs
-- on; `gpus_max` (NULL for a rigid job) is the most. The width an attempt runs at is the
-- number of its GPUs (`gpu_uuids`, and the attempt's row in `job_attempts`).
ALTER TABLE jobs ADD COLUMN gpus_max INTEGER;
