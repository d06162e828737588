-- GPU-to-job allocations as intervals, not labels on every sample. An open allocation has no
-- ended_at; one whose exporter went quiet is closed by expiry (collector/store/allocations.py).
CREATE TABLE job_allocation (
    allocation_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id        text NOT NULL,
    username      text,
    node_id       integer NOT NULL REFERENCES node,
    gpu_id        integer NOT NULL REFERENCES gpu,
    started_at    timestamptz NOT NULL,
    last_seen     timestamptz NOT NULL,
    ended_at      timestamptz,
    CHECK (ended_at IS NULL OR ended_at >= started_at)
);
CREATE UNIQUE INDEX job_allocation_one_open_per_gpu ON job_allocation (gpu_id) WHERE ended_at IS NULL;
CREATE INDEX job_allocation_job ON job_allocation (job_id);
CREATE INDEX job_allocation_time ON job_allocation (started_at, ended_at);
