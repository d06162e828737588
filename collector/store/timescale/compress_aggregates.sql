-- TimescaleDB layout, step 2: the continuous aggregates in the columnstore too. As rows, a GPU-day of
-- gpu_rollup_1m (1,440 rows of 18 numbers) is about 290 KB, more than the same day's samples once
-- compressed (~190 KB); compressed, segmented by GPU in time order as the samples are, a few tens of KB.
-- A chunk is compressed once it is older than its refresh window (6 h for the minute aggregates, 12 h
-- for the hour one), so refreshes keep rewriting rows, not compressed batches.
ALTER MATERIALIZED VIEW gpu_rollup_1m SET (timescaledb.compress = true);
SELECT add_compression_policy('gpu_rollup_1m', compress_after => INTERVAL '1 day');
ALTER MATERIALIZED VIEW gpu_energy_1m SET (timescaledb.compress = true);
SELECT add_compression_policy('gpu_energy_1m', compress_after => INTERVAL '1 day');
ALTER MATERIALIZED VIEW gpu_rollup_1h SET (timescaledb.compress = true);
SELECT add_compression_policy('gpu_rollup_1h', compress_after => INTERVAL '2 days');
