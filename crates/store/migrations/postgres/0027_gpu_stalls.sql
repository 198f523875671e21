-- Gantry store schema, version 27 (issue 22.5: data stalls counted):
-- per allocation and hour, the GPU time the agent judged for data stalls (`measured_milli_ms`:
-- samples that carried the job's input side) and the part of it lost waiting for input
-- (`stalled_milli_ms`), both milli-GPU-ms like `used_milli_ms`.
ALTER TABLE gpu_use ADD COLUMN measured_milli_ms BIGINT NOT NULL DEFAULT 0;
ALTER TABLE gpu_use ADD COLUMN stalled_milli_ms BIGINT NOT NULL DEFAULT 0;
