#!/bin/bash
# The real NVML backend while the GPU works: bf16 matrix products for ~20 s, the exporter sampling each second.
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/load.log") 2>&1
python3 -m pip install --no-deps --no-build-isolation -q . || exit 1
gpuscope exporter --backend nvml --listen 127.0.0.1:9400 --interval 1 --jobs none --node h200-device &
pid=$!
python3 - <<'PY' &
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
end = time.time() + 22
n = 0
while time.time() < end:
    for _ in range(20): c = a @ b
    torch.cuda.synchronize(); n += 20
print("matmuls", n, "TFLOP/s", round(n * 2 * 8192**3 / 22 / 1e12))
PY
load=$!
sleep 6
python3 - <<'PY'
import urllib.request, time, re
keys = ("utilization_ratio", "sm_active_ratio", "tensor_active_ratio", "dram_active_ratio", "power_watts{", "temperature_celsius{", "sm_clock_hertz", "energy_joules_total", "memory_used_bytes", "clock_event_active")
for i in range(4):
    body = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=10).read().decode()
    print(f"--- scrape {i} at {time.strftime('%H:%M:%S')}")
    for line in body.splitlines():
        if line.startswith("gpuscope_gpu_") and any(k in line for k in keys) and not line.endswith(" 0"):
            print(re.sub(r'uuid="[^"]*",?', "", line))
    time.sleep(4)
PY
wait $load
kill $pid; wait $pid
