-- Gantry store schema, version 25 (issue 23.2: idle GPUs lent):
-- a GPU lent by a job idle past its team's `lend` limit. The owner keeps its
-- allocation; one preemptible job may borrow the GPU (`borrower_job_id`, `borrower_attempt`:
-- a borrower holds no allocation row, its GPU is its owner's) until the loan is given back
-- (`returned_at`, `returned_why`: the owner's processes used the GPU again, or the owner
-- ended), which preempts the borrower. `memory_mib`: what the owner's processes left free.
CREATE TABLE gpu_loans (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    gpu_uuid TEXT NOT NULL,
    owner_job_id INTEGER NOT NULL REFERENCES jobs(id),
    owner_attempt INTEGER NOT NULL,
    memory_mib INTEGER NOT NULL,
    evidence TEXT NOT NULL,
    lent_at INTEGER NOT NULL,
    borrower_job_id INTEGER REFERENCES jobs(id),
    borrower_attempt INTEGER,
    returned_at INTEGER,
    returned_why TEXT
);
CREATE INDEX gpu_loans_open ON gpu_loans(gpu_uuid) WHERE returned_at IS NULL;
CREATE INDEX gpu_loans_borrower ON gpu_loans(borrower_job_id);
