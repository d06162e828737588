"""The shipped PromQL rules on a real Prometheus (Debian's /usr/bin/prometheus): it scrapes a stand-in
exporter that serves what gpuscope's exporter serves (both InfiniBand error counters of a port, all three
NVLink error counters of a GPU, one gauge per clock-event reason, XID series that appear with a value),
through the shipped scrape configuration, and every rule must evaluate without error and find its alert.

promtool's unit tests check what fires when; this checks what a running Prometheus makes of the rules,
e.g. "vector cannot contain metrics with the same labelset", which only shows in /api/v1/rules (a control
rule written the old way must show it, so the check is known to catch it). Only the groups' intervals
change (1 s instead of 15 s to 1 min), so that every group is evaluated within seconds."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from gpuscope.core.listen import free_loopback_port
from tests.commands import stop_process
from tests.conftest import require_tool
from tests.waiting import eventually

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
THERMAL = {"sw_thermal_slowdown", "hw_thermal_slowdown"}
POWER = {"sw_power_cap", "hw_power_brake_slowdown"}
REASONS = [
    "gpu_idle", "applications_clocks_setting", "sw_power_cap", "hw_slowdown", "sync_boost",
    "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "display_clocks_setting",
]  # fmt: skip
CONTROL_NAME = "OldInfinibandErrorsIncreasing"
# The InfiniBand rule as it was: increase() over a name regex drops the names, and a port's two counters
# collide.
CONTROL = """
groups:
  - name: control
    interval: 1s
    rules:
      - alert: OldInfinibandErrorsIncreasing
        expr: sum by (job, instance, device, port) (increase({__name__=~"gpuscope_ib_port_(symbol_errors|link_downed)_total"}[10m])) > 0
"""  # noqa: E501


def exposition(scrape: int) -> str:
    """What the stand-in exporter serves on its `scrape`th scrape (from 0): counters grow each scrape;
    XID series appear from the fourth, the critical one at 1."""
    gpu0, gpu1 = 'gpu="0",uuid="GPU-a"', 'gpu="1",uuid="GPU-b"'
    port = 'device="mlx5_0",port="1"'
    lines = [
        'gpuscope_exporter_info{exporter_cluster="prod",exporter_rack="rack-01",node="gpu-node-001",'
        'backend="sim",version="test"} 1',
        f"gpuscope_gpu_up{{{gpu0}}} 1",
        f"gpuscope_gpu_up{{{gpu1}}} 0",
        f"gpuscope_gpu_temperature_celsius{{{gpu0}}} 90",
        f"gpuscope_gpu_utilization_ratio{{{gpu0}}} 0.01",
        f'gpuscope_gpu_job_info{{{gpu0},job_id="42",user="ada"}} 1',
        f"gpuscope_gpu_row_remap_failed{{{gpu0}}} 1",
        f"gpuscope_gpu_ecc_uncorrected_errors_total{{{gpu0}}} {scrape}",
        f"gpuscope_gpu_nvlink_crc_errors_total{{{gpu0}}} {2 * scrape}",
        f"gpuscope_gpu_nvlink_replay_errors_total{{{gpu0}}} {scrape}",
        f"gpuscope_gpu_nvlink_recovery_errors_total{{{gpu0}}} 0",
        f"gpuscope_ib_port_symbol_errors_total{{{port}}} {3 * scrape}",
        f"gpuscope_ib_port_link_downed_total{{{port}}} {scrape}",
        f"gpuscope_ib_port_state{{{port}}} 1",
        f"gpuscope_ib_port_physical_state{{{port}}} 3",
        'gpuscope_straggler_slowdown_ratio{job_id="42",node="gpu-node-001",gpu="0",cause="thermal"} 0.2',
    ]
    health = 'gpuscope_node_health_jobs_running{{cluster="prod",node="{}",state="{}",reason="{}"}} {}'
    lines += [
        health.format("gpu-node-001", "drained", "XID 79 on GPU 0", 2),
        health.format("gpu-node-002", "unhealthy", "drain refused", 0),
        health.format("gpu-node-003", "suspect", "NVLink flaps", 1),
        'gpuscope_collector_database_state{state="ok"} 0',
        'gpuscope_collector_database_state{state="disk_full"} 1',
        "gpuscope_collector_database_free_bytes 0",
    ]
    lines += [
        f'gpuscope_gpu_clock_event_active{{{gpu0},reason="{r}"}} {int(r in {"sw_thermal_slowdown", "sw_power_cap"})}'
        for r in REASONS
    ]
    if scrape >= 3:
        lines.append(f'gpuscope_gpu_xid_errors_total{{{gpu0},xid="79"}} 1')
        lines.append(f'gpuscope_gpu_xid_errors_total{{{gpu0},xid="13"}} {1 if scrape < 5 else 2}')
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def stand_in_exporter() -> Iterator[int]:
    """An HTTP server on 127.0.0.1 serving `exposition` on /metrics; yields its port."""
    scrapes = iter(range(1_000_000))
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with lock:
                body = exposition(next(scrapes)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextlib.contextmanager
def refusing_port() -> Iterator[int]:
    """A port on 127.0.0.1 that is bound but not listening: connections to it are refused."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def write_config(folder: Path, exporter: int, down: int) -> Path:
    """The shipped prometheus.yml and rules, pointed at the stand-in exporter (through the shipped file_sd
    example's labels), a down dcgm-exporter job and a down collector; 1 s scrapes and evaluations."""
    rules = yaml.safe_load((PROMETHEUS / "gpuscope-rules.yaml").read_text())
    for group in rules["groups"]:
        group["interval"] = "1s"
    (folder / "gpuscope-rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (folder / "control.yaml").write_text(CONTROL)
    targets = yaml.safe_load((PROMETHEUS / "gpuscope-exporters.example.yaml").read_text())
    targets = [{"targets": [f"127.0.0.1:{exporter}"], "labels": targets[0]["labels"]}]
    (folder / "targets.yaml").write_text(yaml.safe_dump(targets))

    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(folder / "gpuscope-rules.yaml"), str(folder / "control.yaml")]
    del config["alerting"]
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    native, collector = jobs["gpuscope-exporter"], jobs["gpuscope-collector"]
    native.update(scrape_interval="1s", scrape_timeout="1s")
    native["file_sd_configs"] = [{"files": [str(folder / "targets.yaml")]}]
    collector.update(scrape_interval="1s", scrape_timeout="1s", static_configs=[{"targets": [f"127.0.0.1:{down}"]}])
    dcgm = {"job_name": "dcgm-exporter", "static_configs": [{"targets": [f"127.0.0.1:{down}"]}]}
    config["scrape_configs"].append(dcgm)
    path = folder / "prometheus.yml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@contextlib.contextmanager
def running_prometheus(config: Path, folder: Path) -> Iterator[str]:
    """`prometheus` on 127.0.0.1 with a fresh TSDB under `folder`, until ready; stopped afterwards."""
    port = free_loopback_port()
    log = folder / "prometheus.log"
    args = [
        require_tool("prometheus"),
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    with log.open("w") as output:
        process = subprocess.Popen(args, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited with {process.returncode}:\n{log.read_text()}")
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)

    try:
        eventually(ready, what="prometheus ready", timeout=15, interval=0.2, ignoring=(AssertionError, OSError))
        yield url
    finally:
        stop_process(process, timeout=10)


def api(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}/api/v1/{path}", timeout=5) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return answer["data"]


def test_every_rule_evaluates_without_error_and_finds_its_alert(tmp_path: Path) -> None:
    require_tool("prometheus")
    with stand_in_exporter() as exporter, refusing_port() as down:
        config = write_config(tmp_path, exporter, down)
        with running_prometheus(config, tmp_path) as url:

            def all_evaluated() -> list[dict[str, Any]]:
                rules = [rule for group in api(url, "rules")["groups"] for rule in group["rules"]]
                shipped = [rule for rule in rules if rule["name"] != CONTROL_NAME]
                if any(rule["health"] == "err" for rule in shipped):
                    return rules  # a real error: no use waiting
                quiet = [rule["name"] for rule in shipped if rule["health"] != "ok" or not rule["alerts"]]
                assert not quiet, f"not evaluated yet or no alert yet: {quiet}"
                assert [rule["health"] for rule in rules if rule["name"] == CONTROL_NAME] == ["err"], "control"
                return rules

            rules = eventually(all_evaluated, what="an alert from every rule", timeout=25, interval=0.5)
            info = api(url, "query?query=gpuscope_exporter_info")["result"]

    control = [rule for rule in rules if rule["name"] == CONTROL_NAME]
    shipped = [rule for rule in rules if rule["name"] != CONTROL_NAME]
    assert len(shipped) == 19
    for rule in shipped:
        assert (rule["health"], rule.get("lastError", "")) == ("ok", ""), rule  # lastError: omitted when empty
    assert "same labelset" in control[0].get("lastError", ""), "the check would not catch the counters colliding"

    alerts: dict[str, list[dict[str, str]]] = {}  # by alert name (GpuXidError is two rules)
    for rule in shipped:
        alerts.setdefault(rule["name"], []).extend(alert["labels"] for alert in rule["alerts"])
    target = {"job": "gpuscope-exporter", "instance": f"127.0.0.1:{exporter}", "cluster": "prod", "rack": "rack-01"}
    assert alerts["InfinibandErrorsIncreasing"] == [
        {**target, "alertname": "InfinibandErrorsIncreasing", "device": "mlx5_0", "port": "1", "severity": "warning"}
    ]
    assert alerts["NvlinkErrorsIncreasing"] == [
        {**target, "alertname": "NvlinkErrorsIncreasing", "gpu": "0", "uuid": "GPU-a", "severity": "warning"}
    ]
    xids = {(labels["xid"], labels["severity"]) for labels in alerts["GpuXidError"]}
    assert xids == {("79", "critical"), ("13", "warning")}, "an XID series that appears at 1 fires"
    assert {labels["job"] for labels in alerts["ExporterDown"]} == {"dcgm-exporter"}, "not the collector's"
    for name in ("GpuThermalThrottling", "GpuPowerThrottling"):
        assert [labels.get("reason") for labels in alerts[name]] == [None], "one alert per GPU"

    # instance stays host:port; the file_sd topology and the exporter's own labels do not clash
    assert [sample["metric"] for sample in info] == [
        {
            "__name__": "gpuscope_exporter_info",
            **target,
            "exporter_cluster": "prod",
            "exporter_rack": "rack-01",
            "node": "gpu-node-001",
            "backend": "sim",
            "version": "test",
        }
    ]
