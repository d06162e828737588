-- Metrics the NVML and InfiniBand sources report beyond the first schema.
ALTER TABLE gpu_sample
    ADD COLUMN pcie_tx_bytes_per_s         real,
    ADD COLUMN pcie_rx_bytes_per_s         real,
    ADD COLUMN throttle_power_s            double precision,
    ADD COLUMN throttle_thermal_s          double precision,
    ADD COLUMN remapped_rows_correctable   bigint,
    ADD COLUMN remapped_rows_uncorrectable bigint,
    ADD COLUMN remap_pending               smallint,
    ADD COLUMN remap_failure               smallint,
    ADD COLUMN nvlink_tx_bytes             bigint,
    ADD COLUMN nvlink_rx_bytes             bigint,
    ADD COLUMN nvlink_crc_errors           bigint,
    ADD COLUMN nvlink_replay_errors        bigint,
    ADD COLUMN nvlink_recovery_errors      bigint;

ALTER TABLE ib_port_sample
    ADD COLUMN link_error_recovery bigint,
    ADD COLUMN xmit_discards       bigint,
    ADD COLUMN phys_state          smallint;
