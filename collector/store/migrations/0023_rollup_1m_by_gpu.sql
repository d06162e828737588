-- One GPU's minutes without its heap pages (plain layout). The rollup job writes a minute of every GPU at a
-- time, so one GPU's day of minute rows lies on about 1,440 heap pages (one per minute): a node or GPU
-- page's day at 1-minute buckets cost a page read per bucket (4.4 ms of a 4.7-ms statement at 1,024 GPUs).
-- The primary key now carries the rolled-up columns (INCLUDE), so that read is an index-only scan of a few
-- dozen pages in GPU order (0.4 ms). It replaces the old key rather than adding an index beside it: the key
-- grows from about 43 to about 143 bytes a row (60 to 211 MB a day at 1,024 GPUs), with no second key.
-- Index-only scans skip the heap only on pages the visibility map marks all-visible, which VACUUM sets.
-- The table only grows (a row a GPU a minute); by default autovacuum visits an insert-only table after a
-- fifth of its rows are new (days of minutes), so it is told to come every 10,000 new rows (about ten
-- minutes at 1,024 GPUs; at most once a minute, autovacuum's naptime, on a large fleet).
-- The new key is built first, beside the old one, under a lock that lets reads go on (writes, the rollup
-- job's, wait); only the swap at the end locks reads out, briefly. Building it takes about 1.5 s per
-- 1.5 million rows (a day at 1,024 GPUs) here, and room for both keys and the build's sort at once.
-- The TimescaleDB layout's gpu_rollup_1m is a continuous aggregate, with its own indexes: left alone.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schema_migration WHERE version = 1000000) THEN
        CREATE UNIQUE INDEX gpu_rollup_1m_by_gpu ON gpu_rollup_1m (gpu_id, bucket)
            INCLUDE (samples, up_samples, util_sum, util_n, sm_active_sum, sm_active_n, tensor_sum, tensor_n,
                     power_sum, power_n, temp_sum, temp_n, temp_max, sm_clock_sum, sm_clock_n, sm_clock_min);
        ALTER TABLE gpu_rollup_1m DROP CONSTRAINT gpu_rollup_1m_pkey;
        -- Renames the index to gpu_rollup_1m_pkey.
        ALTER TABLE gpu_rollup_1m ADD CONSTRAINT gpu_rollup_1m_pkey PRIMARY KEY USING INDEX gpu_rollup_1m_by_gpu;
        ALTER TABLE gpu_rollup_1m SET (autovacuum_vacuum_insert_threshold = 10000,
                                       autovacuum_vacuum_insert_scale_factor = 0);
    END IF;
END $$;
