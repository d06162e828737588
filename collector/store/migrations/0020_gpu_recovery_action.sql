-- What the driver says must be done for a GPU (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: 0 none, 1 GPU reset,
-- 2 node reboot, 3 drain P2P, 4 drain and reset, 5 recover IMEX domain, 6 bus reset, 7 system reboot);
-- NULL where the exporter's driver lacks the field, or before this column. A smallint, as the row-remap
-- flags: two bytes a row in the COPY. Added to the partitioned parent (or the hypertable), it reaches
-- every partition (or chunk) without rewriting them: a nullable column with no default.
ALTER TABLE gpu_sample ADD COLUMN recovery_action smallint;
