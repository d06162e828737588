"""Per-node exporter: reads GPU and fabric telemetry, serves /metrics, pushes batches to the collector."""
