-- One-hour rollups, aggregated from the one-minute rollup (same sums and counts, so any coarser
-- bucket is still an exact mean), for ranges of days to months.
CREATE TABLE gpu_rollup_1h (LIKE gpu_rollup_1m INCLUDING ALL);

-- Hours whose minutes were rolled up (again) since the hour was last aggregated.
CREATE TABLE rollup_dirty_hour (
    bucket timestamptz PRIMARY KEY
);
