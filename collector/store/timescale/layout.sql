-- TimescaleDB layout: applied once, after the numbered migrations, when the extension is available.
-- Everything TimescaleDB-specific the collector runs is in this file and collector/store/timescale/.
-- The plain-PostgreSQL objects it replaces keep their names and columns, so the query layer reads
-- both layouts the same way.
CREATE EXTENSION IF NOT EXISTS timescaledb;

-- The alert rules' views read the tables replaced below; alerts/views.py re-creates them afterwards.
DROP SCHEMA IF EXISTS alerting CASCADE;

-- Samples: hypertables instead of daily partitions. One-hour chunks: at 10,000 rows/s (100,000 GPUs
-- every 10 s) a chunk's (gpu_id, ts) index is about 1 GB, which keeps the chunks being written inside
-- a quarter of the shared_buffers of a server sized for that rate.
DO $$
DECLARE
    tbl text;
    device text;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['gpu_sample', 'ib_port_sample', 'mig_sample'] LOOP
        -- A table a later migration adds (mig_sample, 0013) makes itself a hypertable where the layout
        -- was applied before it.
        CONTINUE WHEN to_regclass(tbl) IS NULL;
        device := CASE tbl WHEN 'gpu_sample' THEN 'gpu_id' WHEN 'mig_sample' THEN 'mig_id' ELSE 'port_id' END;
        EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, tbl || '_partitioned');
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS)', tbl, tbl || '_partitioned');
        PERFORM create_hypertable(tbl::regclass, by_range('ts', INTERVAL '1 hour'));
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', tbl, tbl || '_partitioned');
        EXECUTE format('DROP TABLE %I', tbl || '_partitioned');
        EXECUTE format('CREATE INDEX %I ON %I (%I, ts DESC)', tbl || '_' || device || '_ts', tbl, device);
        -- Columnstore: one segment per device and chunk (360 rows per GPU-hour at 10 s: dense), in
        -- time order; chunks are compressed once they are two hours old.
        EXECUTE format('ALTER TABLE %I SET (timescaledb.compress, timescaledb.compress_segmentby = %L,'
                       ' timescaledb.compress_orderby = ''ts DESC'')', tbl, device);
        PERFORM add_compression_policy(tbl::regclass, INTERVAL '2 hours');
    END LOOP;
END $$;

-- Rollups: continuous aggregates with real-time aggregation (materialized_only = false: the default
-- is true since 2.13), same names and columns as the plain tables; the hour one is built on the
-- minute one. The incremental bookkeeping of the plain layout is not used.
DROP TABLE gpu_rollup_1m, gpu_rollup_1h, rack_power_1m;

CREATE MATERIALIZED VIEW gpu_rollup_1m WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 minute', ts) AS bucket, gpu_id,
       count(*) AS samples, count(*) FILTER (WHERE up) AS up_samples,
       sum(util_pct)::float8 AS util_sum, count(util_pct) AS util_n,
       sum(sm_active_pct)::float8 AS sm_active_sum, count(sm_active_pct) AS sm_active_n,
       sum(tensor_active_pct)::float8 AS tensor_sum, count(tensor_active_pct) AS tensor_n,
       sum(power_w)::float8 AS power_sum, count(power_w) AS power_n,
       sum(temp_c)::float8 AS temp_sum, count(temp_c) AS temp_n, max(temp_c) AS temp_max,
       sum(sm_clock_mhz)::float8 AS sm_clock_sum, count(sm_clock_mhz) AS sm_clock_n, min(sm_clock_mhz) AS sm_clock_min
FROM gpu_sample GROUP BY 1, 2 WITH NO DATA;

CREATE MATERIALIZED VIEW gpu_rollup_1h WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 hour', bucket) AS bucket, gpu_id,
       sum(samples)::bigint AS samples, sum(up_samples)::bigint AS up_samples,
       sum(util_sum) AS util_sum, sum(util_n)::bigint AS util_n,
       sum(sm_active_sum) AS sm_active_sum, sum(sm_active_n)::bigint AS sm_active_n,
       sum(tensor_sum) AS tensor_sum, sum(tensor_n)::bigint AS tensor_n,
       sum(power_sum) AS power_sum, sum(power_n)::bigint AS power_n,
       sum(temp_sum) AS temp_sum, sum(temp_n)::bigint AS temp_n, max(temp_max) AS temp_max,
       sum(sm_clock_sum) AS sm_clock_sum, sum(sm_clock_n)::bigint AS sm_clock_n, min(sm_clock_min) AS sm_clock_min
FROM gpu_rollup_1m GROUP BY 1, 2 WITH NO DATA;

-- Each GPU's energy counter at its first and last sample of each minute (migration 0016, which makes the
-- plain table where this layout is not applied, and this aggregate where it was applied before 0016).
DROP TABLE IF EXISTS gpu_energy_1m;
CREATE MATERIALIZED VIEW gpu_energy_1m WITH (timescaledb.continuous, timescaledb.materialized_only = false) AS
SELECT time_bucket(INTERVAL '1 minute', ts) AS bucket, gpu_id, first(energy_j, ts) AS first_j, last(energy_j, ts) AS last_j
FROM gpu_sample WHERE energy_j IS NOT NULL GROUP BY 1, 2 WITH NO DATA;

-- Refresh windows end well inside raw retention (the shortest is one day), so a refresh never sees
-- raw chunks already dropped and never erases aggregates of them.
SELECT add_continuous_aggregate_policy('gpu_rollup_1m', start_offset => INTERVAL '6 hours',
       end_offset => INTERVAL '2 minutes', schedule_interval => INTERVAL '1 minute');
SELECT add_continuous_aggregate_policy('gpu_energy_1m', start_offset => INTERVAL '6 hours',
       end_offset => INTERVAL '2 minutes', schedule_interval => INTERVAL '1 minute');
SELECT add_continuous_aggregate_policy('gpu_rollup_1h', start_offset => INTERVAL '12 hours',
       end_offset => INTERVAL '1 hour', schedule_interval => INTERVAL '15 minutes');

-- Power per rack per minute: a view over the minute aggregate (rack membership is inventory, which a
-- continuous aggregate cannot join at refresh time without freezing it).
CREATE VIEW rack_power_1m AS
SELECT r.bucket, n.cluster, n.rack, sum(r.power_sum / r.power_n) AS watts, count(*) AS gpus
FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id) JOIN node n USING (node_id)
WHERE r.power_n > 0 GROUP BY 1, 2, 3;

-- Power per rack per 10 minutes (migration 0022, which made the plain table before this layout): here
-- rack_power_1m's rows as they are, one minute each, with the plain table's columns (readers sum them
-- over whole 10-minute ranges; a view grouping them would aggregate every minute kept at each read).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_class WHERE relname = 'rack_power_10m' AND relkind = 'r') THEN
        DROP TABLE rack_power_10m;
    END IF;
END $$;
CREATE OR REPLACE VIEW rack_power_10m AS
SELECT bucket, cluster, rack, watts AS watts_sum, 1 AS minutes FROM rack_power_1m;

-- The node tier (migration 0019, which made the plain table before this layout): a view over the
-- minute aggregate, as rack_power_1m, with the plain table's columns.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_class WHERE relname = 'node_rollup_1m' AND relkind = 'r') THEN
        DROP TABLE node_rollup_1m;
    END IF;
END $$;
CREATE OR REPLACE VIEW node_rollup_1m AS
SELECT r.bucket, g.node_id, count(*)::integer AS gpus,
       sum(r.util_sum / nullif(r.util_n, 0)) AS util_mean_sum, count(*) FILTER (WHERE r.util_n > 0)::integer AS util_gpus,
       sum(r.sm_active_sum / nullif(r.sm_active_n, 0)) AS sm_active_mean_sum,
       count(*) FILTER (WHERE r.sm_active_n > 0)::integer AS sm_active_gpus,
       sum(r.tensor_sum / nullif(r.tensor_n, 0)) AS tensor_mean_sum, count(*) FILTER (WHERE r.tensor_n > 0)::integer AS tensor_gpus,
       sum(r.power_sum / nullif(r.power_n, 0)) AS power_mean_sum, count(*) FILTER (WHERE r.power_n > 0)::integer AS power_gpus,
       sum(r.temp_sum / nullif(r.temp_n, 0)) AS temp_mean_sum, count(*) FILTER (WHERE r.temp_n > 0)::integer AS temp_gpus,
       sum(r.sm_clock_sum / nullif(r.sm_clock_n, 0)) AS sm_clock_mean_sum,
       count(*) FILTER (WHERE r.sm_clock_n > 0)::integer AS sm_clock_gpus
FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id) GROUP BY 1, 2;
