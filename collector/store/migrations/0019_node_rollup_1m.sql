-- Per node and minute, each rolled metric summed over the node's GPUs' minute means, with how many GPUs
-- had a value: a node's (or a rack's) heatmap row is the mean over its GPUs of their means, so these
-- rows answer the overview's node- and rack-level heatmap and the rack power chart without reading
-- 100,000 GPUs' minute rows (12,500 nodes' instead). `gpus`: GPUs with any sample in the minute.
-- The plain layout fills it with the minute rollup (collector/store/node_rollup.py); the TimescaleDB
-- layout, whose minute rollup is a continuous aggregate, makes it a view over that of the same columns.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schema_migration WHERE version = 1000000) THEN
        CREATE TABLE node_rollup_1m (
            bucket         timestamptz NOT NULL,
            node_id        integer NOT NULL,
            gpus           integer NOT NULL,
            util_mean_sum      double precision, util_gpus      integer NOT NULL,
            sm_active_mean_sum double precision, sm_active_gpus integer NOT NULL,
            tensor_mean_sum    double precision, tensor_gpus    integer NOT NULL,
            power_mean_sum     double precision, power_gpus     integer NOT NULL,
            temp_mean_sum      double precision, temp_gpus      integer NOT NULL,
            sm_clock_mean_sum  double precision, sm_clock_gpus  integer NOT NULL,
            PRIMARY KEY (node_id, bucket)
        );
        CREATE INDEX node_rollup_1m_bucket ON node_rollup_1m USING brin (bucket);
        -- The minutes an upgraded site's charts read at one-minute buckets (ranges of a few hours) from
        -- the minute rollup already kept; older ones are read per GPU as before (the tier answers
        -- one-minute buckets only). Maintenance keeps it from here on.
        INSERT INTO node_rollup_1m
        SELECT r.bucket, g.node_id, count(*),
               sum(r.util_sum / nullif(r.util_n, 0)), count(*) FILTER (WHERE r.util_n > 0),
               sum(r.sm_active_sum / nullif(r.sm_active_n, 0)), count(*) FILTER (WHERE r.sm_active_n > 0),
               sum(r.tensor_sum / nullif(r.tensor_n, 0)), count(*) FILTER (WHERE r.tensor_n > 0),
               sum(r.power_sum / nullif(r.power_n, 0)), count(*) FILTER (WHERE r.power_n > 0),
               sum(r.temp_sum / nullif(r.temp_n, 0)), count(*) FILTER (WHERE r.temp_n > 0),
               sum(r.sm_clock_sum / nullif(r.sm_clock_n, 0)), count(*) FILTER (WHERE r.sm_clock_n > 0)
        FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id)
        WHERE r.bucket >= date_trunc('minute', now()) - interval '6 hours' GROUP BY 1, 2;
    ELSE  -- OR REPLACE: the layout (timescale/layout.sql) may have made it already
        CREATE OR REPLACE VIEW node_rollup_1m AS
        SELECT r.bucket, g.node_id, count(*)::integer AS gpus,
               sum(r.util_sum / nullif(r.util_n, 0)) AS util_mean_sum, count(*) FILTER (WHERE r.util_n > 0)::integer AS util_gpus,
               sum(r.sm_active_sum / nullif(r.sm_active_n, 0)) AS sm_active_mean_sum,
               count(*) FILTER (WHERE r.sm_active_n > 0)::integer AS sm_active_gpus,
               sum(r.tensor_sum / nullif(r.tensor_n, 0)) AS tensor_mean_sum,
               count(*) FILTER (WHERE r.tensor_n > 0)::integer AS tensor_gpus,
               sum(r.power_sum / nullif(r.power_n, 0)) AS power_mean_sum,
               count(*) FILTER (WHERE r.power_n > 0)::integer AS power_gpus,
               sum(r.temp_sum / nullif(r.temp_n, 0)) AS temp_mean_sum, count(*) FILTER (WHERE r.temp_n > 0)::integer AS temp_gpus,
               sum(r.sm_clock_sum / nullif(r.sm_clock_n, 0)) AS sm_clock_mean_sum,
               count(*) FILTER (WHERE r.sm_clock_n > 0)::integer AS sm_clock_gpus
        FROM gpu_rollup_1m r JOIN gpu g USING (gpu_id) GROUP BY 1, 2;
    END IF;
END $$;
