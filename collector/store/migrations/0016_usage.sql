-- Usage accounting (docs/reports.md): who held the GPUs, how well they used them, the energy they drew.

-- Each GPU's energy counter (energy_j, joules since the driver loaded) at its first and last sample of
-- each minute: the counter's growth between any two minutes, resets included, is read from these
-- (collector/store/usage.py). The plain layout fills it with the minute rollup; the TimescaleDB layout
-- replaces it with a continuous aggregate of the same name and columns.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schema_migration WHERE version = 1000000) THEN
        CREATE TABLE gpu_energy_1m (
            bucket  timestamptz NOT NULL,
            gpu_id  integer NOT NULL,
            first_j double precision NOT NULL,
            last_j  double precision NOT NULL,
            PRIMARY KEY (gpu_id, bucket)
        );
        CREATE INDEX gpu_energy_1m_bucket ON gpu_energy_1m USING brin (bucket);
    -- A database on the TimescaleDB layout, applied before this migration by a collector that did not
    -- know this aggregate: the same continuous aggregate layout.sql makes on a new one.
    ELSIF to_regclass('gpu_energy_1m') IS NULL THEN
        EXECUTE 'CREATE MATERIALIZED VIEW gpu_energy_1m WITH (timescaledb.continuous,'
                ' timescaledb.materialized_only = false) AS'
                ' SELECT time_bucket(INTERVAL ''1 minute'', ts) AS bucket, gpu_id,'
                ' first(energy_j, ts) AS first_j, last(energy_j, ts) AS last_j'
                ' FROM gpu_sample WHERE energy_j IS NOT NULL GROUP BY 1, 2 WITH NO DATA';
        PERFORM add_continuous_aggregate_policy('gpu_energy_1m', start_offset => INTERVAL '6 hours',
                end_offset => INTERVAL '2 minutes', schedule_interval => INTERVAL '1 minute');
    END IF;
END $$;

-- Per hour and job (and GPU model, since a price is per model): GPU-seconds allocated, measured, doing
-- work, held idle, and the energy drawn. Each hour is rebuilt whole, so rows have no key of their own.
CREATE TABLE usage_1h (
    bucket            timestamptz NOT NULL,
    job_id            text NOT NULL,
    model             text NOT NULL,
    username          text,
    account           text,
    partition         text,
    namespace         text,
    gpus              double precision NOT NULL,  -- GPUs held in the hour (MIG devices: their share)
    allocated_s       double precision NOT NULL,  -- GPU-seconds held
    measured_s        double precision NOT NULL,  -- of which with an activity reading
    active_s          double precision NOT NULL,  -- GPU-seconds weighted by SM activity (utilisation where none)
    active_sm_s       double precision NOT NULL,  -- measured seconds whose weight was SM activity
    tensor_s          double precision NOT NULL,  -- GPU-seconds weighted by tensor-core activity
    tensor_measured_s double precision NOT NULL,
    idle_s            double precision NOT NULL,  -- held idle: under the threshold for a stretch
    energy_j          double precision NOT NULL,
    energy_counter_s  double precision NOT NULL   -- measured seconds whose energy came from the counter
);
CREATE INDEX usage_1h_bucket ON usage_1h (bucket);

-- Which hours usage_1h holds, when each was computed, and whether it can still change.
CREATE TABLE usage_hour (
    bucket      timestamptz PRIMARY KEY,
    computed_at timestamptz NOT NULL,
    final       boolean NOT NULL
);

-- The grid's carbon intensity as the site loads it (gpuscope reports grid-load): each value holds from
-- its time until the next one.
CREATE TABLE grid_intensity (
    ts        timestamptz PRIMARY KEY,
    g_per_kwh double precision NOT NULL CHECK (g_per_kwh >= 0 AND g_per_kwh < 10000)
);
