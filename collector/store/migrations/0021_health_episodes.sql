-- Health episodes (health/episodes.py): one row per time a node left healthy, from its first finding to
-- its return to service, with the repair the escalation ladder chose, the check's verdict and how long
-- its GPUs were out. What followed (did the same node or GPU fail again within 7 and 30 days) is read
-- from the next episode, so it is never stale.
CREATE TABLE health_episode (
    episode_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    node_id        integer NOT NULL REFERENCES node,
    gpu_id         integer REFERENCES gpu,  -- the GPU the worst finding names; NULL: the node as a whole
    cause          text NOT NULL,           -- 'xid:79', 'ecc_uncorrectable', 'remap_failed', 'nvlink_flap', ...
    cause_detail   text NOT NULL,           -- the worst finding in words
    cause_action   text NOT NULL DEFAULT 'none',  -- what that finding recommends (the ladder's floor)
    started_at     timestamptz NOT NULL,    -- the first finding
    out_at         timestamptz,             -- taken out of service (drained); NULL: never (suspect, dry run)
    back_at        timestamptz,             -- back in service or cleared; NULL: still open
    outcome        text NOT NULL DEFAULT 'open'
                   CHECK (outcome IN ('open', 'cleared', 'returned', 'resumed_by_operator', 'held')),
    held_at        timestamptz,             -- held for hardware inspection (an operator may return it later)
    scope          text NOT NULL DEFAULT 'node' CHECK (scope IN ('node', 'gpu')),  -- gpu: one device taken out (DRA)
    gpus_out       integer NOT NULL DEFAULT 0,  -- GPUs taken out of the fleet while out
    rung           integer,                 -- the ladder's step chosen (0 = first); NULL: no repair chosen
    repair         text,                    -- reset_gpu | reboot_node | inspect
    repair_reason  text,                    -- why this step: the ladder's count, or the driver's or catalogue's floor
    repair_result  text,                    -- the repair command's outcome, or why none ran
    validation     text,                    -- the check's verdict and output tail
    failed_test    text,                    -- the failing test a validation preset named
    dry_run        boolean NOT NULL DEFAULT false
);
CREATE INDEX health_episode_node ON health_episode (node_id, started_at);
CREATE INDEX health_episode_started ON health_episode (started_at);
CREATE UNIQUE INDEX health_episode_one_open ON health_episode (node_id) WHERE back_at IS NULL;
