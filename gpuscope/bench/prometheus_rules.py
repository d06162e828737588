"""Recording rules as an operator puts them behind the dashboards, backfilled with promtool.

Each rule keeps what gpuscope's store keeps per minute (the heatmap's per-GPU minute means, rack_power_1m's
per-rack sums of per-GPU minute means), so that answers from the rules match answers from raw samples.
`promtool tsdb create-blocks-from rules` (2.42) evaluates them through the running server's query_range,
one 2 h window at a time, and writes blocks to a folder of its own. They are moved into the TSDB while
Prometheus is stopped and it is started again, so that they are queryable at once (a running one would
pick them up at its next once-a-minute reload); as they overlap the raw blocks in time, Prometheus merges
them on its next compaction (2.39 and later allow overlapping blocks without a flag). Rules that read other
rules cannot be backfilled this way (promtool evaluates each against the raw data only): none here do.

Evaluation times are Prometheus's own: a group's rules run at a fixed offset within its interval, derived
from a hash of the group's name and file, so minute means are over the minute ending at that offset (not
at :00). rule_evaluations() reads them back for the checks.
"""

from __future__ import annotations

import math
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpuscope.bench.prometheus_http import fetch
from gpuscope.bench.prometheus_series import exposed
from gpuscope.bench.prometheus_server import block_dirs
from gpuscope.bench.telemetry import Telemetry

INTERVAL_S = 60
GPU_UTILIZATION = "gpu:gpuscope_gpu_utilization_ratio:avg_over_time1m"
RACK_POWER = "rack:gpuscope_gpu_power_watts:avg_over_time1m"


def rules_yaml() -> str:
    util, power = exposed("util_pct").name, exposed("power_w").name
    return f"""groups:
  - name: gpuscope-bench
    interval: {INTERVAL_S}s
    rules:
      - record: {GPU_UTILIZATION}
        expr: avg_over_time({util}[1m])
      - record: {RACK_POWER}
        expr: sum by (cluster, rack) (avg_over_time({power}[1m]))
"""


@dataclass(frozen=True)
class RulesBackfill:
    seconds: float  # promtool's run, querying the server and writing blocks
    blocks: int
    bytes: int


def backfill_rules(
    port: int, telemetry: Telemetry, rules_file: Path, output_dir: Path, promtool: str = "promtool"
) -> RulesBackfill:
    """Evaluates the rules over the whole telemetry on the server at `port`, into blocks in `output_dir`.
    The end is a minute past the last sample, so the last minute's evaluation is there too."""
    output_dir.mkdir(parents=True, exist_ok=True)
    args = [
        promtool, "tsdb", "create-blocks-from", "rules", "--quiet",
        f"--url=http://127.0.0.1:{port}",
        f"--start={math.floor(telemetry.start)}",
        f"--end={math.ceil(telemetry.end) + INTERVAL_S}",
        f"--output-dir={output_dir}",
        str(rules_file),
    ]  # fmt: skip
    started = time.perf_counter()
    run = subprocess.run(args, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if run.returncode:
        raise RuntimeError(f"promtool create-blocks-from rules failed ({run.returncode}): {run.stderr[-2000:]}")
    blocks = block_dirs(output_dir)
    size = sum(path.stat().st_size for block in blocks for path in block.rglob("*") if path.is_file())
    return RulesBackfill(round(seconds, 2), len(blocks), size)


def move_blocks(source: Path, data_dir: Path) -> int:
    """Moves promtool's blocks into a stopped Prometheus's TSDB folder; returns how many."""
    blocks = block_dirs(source)
    for block in blocks:
        shutil.move(block, data_dir / block.name)
    return len(blocks)


def rule_evaluations(port: int, telemetry: Telemetry) -> np.ndarray:
    """The times (epoch seconds) at which the rules were evaluated and wrote a sample, read back from
    one rack's series: every rule of the group shares them."""
    rack = telemetry.gpus[0].rack
    span = math.ceil(telemetry.end - telemetry.start) + 2 * INTERVAL_S
    data = fetch(
        port,
        "/api/v1/query",
        {"query": f'{RACK_POWER}{{rack="{rack}"}}[{span}s]', "time": f"{telemetry.end + INTERVAL_S}"},
    )
    if len(data["result"]) != 1:
        raise RuntimeError(f"expected one series of {RACK_POWER} for {rack}, got {len(data['result'])}")
    return np.array([float(stamp) for stamp, _ in data["result"][0]["values"]])
