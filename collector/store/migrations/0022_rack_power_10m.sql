-- Power per rack per 10 minutes: the sum of the rack's minute figures (rack_power_1m.watts) and how many
-- minutes there were, so that any bucket of whole 10 minutes is still the exact mean of its minutes. A
-- day's rack power chart (10-minute buckets) reads 144 rows per rack instead of 1,440.
-- Readers sum watts_sum and minutes over whole 10-minute ranges (bounds on 10-minute boundaries), never
-- assuming one row per 10 minutes: the plain layout fills it with the minute tiers
-- (collector/store/rollups.py); the TimescaleDB layout, whose rack_power_1m is a view over the minute
-- aggregate, makes it a view of rack_power_1m's own rows (one minute each), where a bound on the bucket
-- still reaches the aggregate's index (a view grouping 10 minutes would aggregate every minute kept).
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM schema_migration WHERE version = 1000000) THEN
        CREATE TABLE rack_power_10m (
            bucket    timestamptz NOT NULL,
            cluster   text NOT NULL,
            rack      text NOT NULL,
            watts_sum double precision NOT NULL,
            minutes   integer NOT NULL,
            PRIMARY KEY (bucket, cluster, rack)  -- read as every rack over a time range
        );
        -- The minutes after the last whole 10 minutes are read from rack_power_1m by time alone: its key
        -- starts with the rack. Rows arrive in time order, so a fine-grained BRIN finds them in a few pages.
        CREATE INDEX rack_power_1m_bucket ON rack_power_1m USING brin (bucket) WITH (pages_per_range = 8);
        -- Every minute already kept (a tenth of its rows): the tier answers days-long ranges, so an
        -- upgraded site's history must be in it. Maintenance keeps it from here on.
        INSERT INTO rack_power_10m
        SELECT date_bin('10 minutes', bucket, 'epoch'), cluster, rack, sum(watts), count(*)
        FROM rack_power_1m GROUP BY 1, 2, 3;
    ELSE  -- OR REPLACE: the layout (timescale/layout.sql) may have made it already
        CREATE OR REPLACE VIEW rack_power_10m AS
        SELECT bucket, cluster, rack, watts AS watts_sum, 1 AS minutes FROM rack_power_1m;
    END IF;
END $$;
