-- MIG devices (docs/ingest-format.md, "MIG devices"): a GPU in MIG mode is split into MIG devices, each a
-- compute instance in a GPU instance, with its own UUID. Jobs run on them, so allocations name them.
CREATE TABLE mig_device (
    mig_id              integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gpu_id              integer NOT NULL REFERENCES gpu,
    gpu_instance_id     smallint NOT NULL,
    compute_instance_id smallint NOT NULL,
    uuid                text NOT NULL,
    profile             text NOT NULL,      -- the GPU instance profile, "3g.40gb"
    slices              smallint NOT NULL,  -- compute slices of this MIG device
    gpu_slices          smallint NOT NULL,  -- compute slices of the whole GPU (7 on H100): a device's share
    -- A MIG device destroyed and made again gets a new UUID, and a row of its own: the samples and
    -- allocations of the old one keep their profile.
    UNIQUE (gpu_id, uuid)
);

-- Per MIG device and cycle: the memory and activity of its GPU instance (NULL on the other compute
-- instances of a split GPU instance). Daily partitions, as gpu_sample (collector/store/partitions.py);
-- on the TimescaleDB layout a hypertable instead.
DO $$
BEGIN
    CREATE TABLE mig_sample (
        ts                timestamptz NOT NULL,
        mig_id            integer NOT NULL,
        fb_used_bytes     bigint,
        fb_total_bytes    bigint,
        sm_active_pct     real,
        tensor_active_pct real
    ) PARTITION BY RANGE (ts);
    IF EXISTS (SELECT 1 FROM schema_migration WHERE version = 1000000) THEN
        -- A database already on the TimescaleDB layout (timescale/layout.sql, applied once): no partitions.
        ALTER TABLE mig_sample RENAME TO mig_sample_partitioned;
        CREATE TABLE mig_sample (LIKE mig_sample_partitioned INCLUDING DEFAULTS);
        DROP TABLE mig_sample_partitioned;
        PERFORM create_hypertable('mig_sample'::regclass, by_range('ts', INTERVAL '1 hour'));
        CREATE INDEX mig_sample_mig_id_ts ON mig_sample (mig_id, ts DESC);
        ALTER TABLE mig_sample SET (timescaledb.compress, timescaledb.compress_segmentby = 'mig_id',
                                    timescaledb.compress_orderby = 'ts DESC');
        PERFORM add_compression_policy('mig_sample'::regclass, INTERVAL '2 hours');
    ELSE
        CREATE INDEX mig_sample_ts_brin ON mig_sample USING brin (ts);
        CREATE INDEX mig_sample_mig_ts ON mig_sample (mig_id, ts);
    END IF;
END $$;

-- An allocation of a MIG device keeps its parent GPU in gpu_id; mig_id names the device (NULL: the whole
-- GPU). One open allocation per whole GPU, and one per MIG device.
ALTER TABLE job_allocation ADD COLUMN mig_id integer REFERENCES mig_device;
DROP INDEX job_allocation_one_open_per_gpu;
CREATE UNIQUE INDEX job_allocation_one_open_per_gpu ON job_allocation (gpu_id) WHERE ended_at IS NULL AND mig_id IS NULL;
CREATE UNIQUE INDEX job_allocation_one_open_per_mig ON job_allocation (mig_id) WHERE ended_at IS NULL AND mig_id IS NOT NULL;
