"""One snapshot from the real NVML source, printed field by field, and the time a read takes."""

import time

from gpuscope.exporter.sources.nvml import NvmlSource

source = NvmlSource()
print("driver", source.driver_version, "gpus", source.gpus)
source.read(time.time())
time.sleep(2)
times = []
for _ in range(5):
    t0 = time.perf_counter()
    gpus, ports = source.read(time.time())
    times.append(time.perf_counter() - t0)
    time.sleep(1)
for reading in gpus:
    print("gpu", reading.gpu, "up", reading.up)
    for key, value in sorted(reading.values.items()):
        print(f"  {key} = {value}")
    print("  links", getattr(reading, "links", None))
    print("  xid", reading.xid_counts)
print("read ms", [round(t * 1000, 2) for t in times])
source.close()
