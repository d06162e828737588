-- One-minute rollups of the GPU metrics the dashboard, detector and alerts read over long ranges.
-- Sums and counts (not averages) so that any coarser bucket is an exact average of its minutes.
CREATE TABLE gpu_rollup_1m (
    bucket        timestamptz NOT NULL,
    gpu_id        integer NOT NULL,
    samples       integer NOT NULL,
    up_samples    integer NOT NULL,
    util_sum      double precision, util_n      integer NOT NULL,
    sm_active_sum double precision, sm_active_n integer NOT NULL,
    tensor_sum    double precision, tensor_n    integer NOT NULL,
    power_sum     double precision, power_n     integer NOT NULL,
    temp_sum      double precision, temp_n      integer NOT NULL,
    temp_max      real,
    sm_clock_sum  double precision, sm_clock_n  integer NOT NULL,
    sm_clock_min  real,
    PRIMARY KEY (gpu_id, bucket)
);
CREATE INDEX gpu_rollup_1m_bucket ON gpu_rollup_1m USING brin (bucket);

-- Minutes that received samples since they were last rolled up (late data included).
CREATE TABLE rollup_dirty_minute (
    bucket timestamptz PRIMARY KEY
);
