#!/bin/bash
# The real NVML backend on the lent GPU: install gpuscope (no deps: the image has nvidia-ml-py, numpy,
# grpcio), read one snapshot through exporter/sources/nvml, then run the exporter and scrape /metrics.
export PYTHONUNBUFFERED=1
exec > >(tee "$OUT/run.log") 2>&1
set -x
nvidia-smi
python3 -c "import pynvml, sys; print('nvidia-ml-py', pynvml.__version__ if hasattr(pynvml,'__version__') else '?', sys.version)"
rm -rf build/lib build/bdist.* gpuscope.egg-info
python3 -m pip install --no-deps --no-build-isolation -q . || exit 1
python3 tools/device/snapshot.py > "$OUT/snapshot.txt" 2>&1; tail -60 "$OUT/snapshot.txt"
gpuscope exporter --backend nvml --listen 127.0.0.1:9400 --interval 1 --jobs none --node h200-device &
pid=$!
sleep 12
python3 - <<'PY'
import urllib.request, os
body = urllib.request.urlopen("http://127.0.0.1:9400/metrics", timeout=10).read().decode()
open(os.environ["OUT"] + "/metrics.txt", "w").write(body)
lines = [l for l in body.splitlines() if not l.startswith("#")]
print(len(lines), "samples")
print("\n".join(l for l in lines if "gpu=\"0\"" in l or "gpuscope_gpu" in l)[:6000])
PY
kill $pid; wait $pid
gpuscope exporter --backend nvml --listen 127.0.0.1:9401 --interval 1 --jobs none --dcgm-compat --compat-only &
pid=$!
sleep 8
python3 -c "import urllib.request,os; b=urllib.request.urlopen('http://127.0.0.1:9401/metrics',timeout=10).read().decode(); open(os.environ['OUT']+'/dcgm.txt','w').write(b); print(len(b.splitlines()),'dcgm lines')"
kill $pid; wait $pid
