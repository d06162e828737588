"""The words the wire format uses for a GPU's discrete events (docs/ingest-format.md): the exporter
writes them, the collector stores them and the health rules read them, so they live below all three."""

from __future__ import annotations

XID = "xid"
GPU_LOST = "gpu_lost"
GPU_RECOVERED = "gpu_recovered"

# The XID code for errors the driver could not identify (NVML's eventData 999). Real XID codes start at 1,
# so 0 names no real XID; Prometheus shows it as xid="unknown" and the collector stores it as code 0.
UNKNOWN_XID = 0
