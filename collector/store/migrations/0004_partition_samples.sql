-- Samples partitioned by day (UTC) on plain PostgreSQL: retention drops whole partitions, and each
-- day's indexes stay small. collector/store/partitions.py creates partitions ahead and drops old ones.
-- Existing rows are moved into the new layout.
DO $$
DECLARE
    tbl text;
    day timestamptz;
BEGIN
    FOREACH tbl IN ARRAY ARRAY['gpu_sample', 'ib_port_sample'] LOOP
        EXECUTE format('ALTER TABLE %I RENAME TO %I', tbl, tbl || '_unpartitioned');
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS) PARTITION BY RANGE (ts)', tbl, tbl || '_unpartitioned');
        FOR day IN EXECUTE format(
            'SELECT DISTINCT date_trunc(''day'', ts AT TIME ZONE ''UTC'') AT TIME ZONE ''UTC'' FROM %I', tbl || '_unpartitioned')
        LOOP
            EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
                           tbl || '_p' || to_char(day AT TIME ZONE 'UTC', 'YYYYMMDD'), tbl, day, day + interval '1 day');
        END LOOP;
        EXECUTE format('INSERT INTO %I SELECT * FROM %I', tbl, tbl || '_unpartitioned');
        EXECUTE format('DROP TABLE %I', tbl || '_unpartitioned');
    END LOOP;
END $$;

-- Defined on the parents, created on every partition.
CREATE INDEX gpu_sample_ts_brin ON gpu_sample USING brin (ts);
CREATE INDEX gpu_sample_gpu_ts ON gpu_sample (gpu_id, ts);
CREATE INDEX ib_port_sample_ts_brin ON ib_port_sample USING brin (ts);
CREATE INDEX ib_port_sample_port_ts ON ib_port_sample (port_id, ts);
