-- Stragglers declared by the detector (collector/stragglers): where, why, how bad, since when.
CREATE TABLE straggler (
    straggler_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id       text NOT NULL,
    node_id      integer NOT NULL REFERENCES node,
    gpu_id       integer REFERENCES gpu,  -- NULL: the node or its NIC
    cause        text NOT NULL,           -- thermal | power_cap | slow_nic | slow_host | unknown
    slowdown     real NOT NULL,           -- estimated job slowdown, largest seen while active
    evidence     jsonb NOT NULL DEFAULT '{}',
    started_at   timestamptz NOT NULL,
    declared_at  timestamptz NOT NULL,
    ended_at     timestamptz
);
CREATE INDEX straggler_started ON straggler (started_at);
CREATE INDEX straggler_job ON straggler (job_id);
