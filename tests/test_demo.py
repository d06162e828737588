"""`gpuscope demo` as a user runs it: ready within 60 s with live data, and SIGINT leaves nothing behind."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.collector.helpers import postmaster_pids
from tests.waiting import eventually

READY_WITHIN_S = 60


def dash_callback(base: str) -> dict:
    """Ask the overview page's callback for its outputs, exactly as the browser does."""
    outputs = [
        {"id": "overview-status", "property": "children"},
        {"id": "fleet-summary", "property": "children"},
        {"id": "attention", "property": "children"},
        {"id": "util-heatmap", "property": "figure"},
        {"id": "rack-power", "property": "figure"},
    ]
    payload = {
        "output": "..overview-status.children...fleet-summary.children...attention.children..."
        "util-heatmap.figure...rack-power.figure..",
        "outputs": outputs,
        "inputs": [
            {"id": "refresh", "property": "n_intervals", "value": 1},
            {"id": "range", "property": "value", "value": "15m"},
        ],
        "changedPropIds": ["refresh.n_intervals"],
    }
    response = httpx.post(f"{base}/_dash-update-component", json=payload, timeout=30)
    response.raise_for_status()
    return response.json()["response"]


def test_demo_serves_live_cluster_and_stops_cleanly_on_sigint() -> None:
    started = time.monotonic()
    demo = subprocess.Popen(
        [sys.executable, "-m", "gpuscope.cli", "demo", "--dashboard-port", "0", "--collector-port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    try:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.append(line)
            if "Press Ctrl-C" in line:
                break
        output = "".join(lines)
        assert "Press Ctrl-C" in output, output
        base = re.search(r"dashboard\s+(http://127\.0\.0\.1:\d+)", output).group(1)  # type: ignore[union-attr]
        data_dir = Path(re.search(r"data\s+(\S+) \(temporary\)", output).group(1))  # type: ignore[union-attr]
        assert httpx.get(base, timeout=10).status_code == 200
        response = dash_callback(base)
        assert time.monotonic() - started < READY_WITHIN_S
        summary = json.dumps(response["fleet-summary"])
        assert "GPUs reporting: 128 / 128" in summary, summary
        heatmap = response["util-heatmap"]["figure"]["data"][0]
        assert len(heatmap["y"]) == 128
        assert len(response["rack-power"]["figure"]["data"]) == 4
        assert postmaster_pids(data_dir), "the embedded PostgreSQL should be running"
        alerts = re.search(r"alerts\s+(http://127\.0\.0\.1:\d+)/api/v1/alerts", output).group(1)  # type: ignore[union-attr]

        def every_rule() -> list[dict]:
            rules = httpx.get(f"{alerts}/api/v1/alerts/rules", timeout=10).json()
            assert len(rules) >= 13, rules
            return rules

        rules = eventually(every_rule, timeout=20, interval=0.5, what="the alert engine to list the 13 default rules")
        assert [r["alertname"] for r in rules if r["error"]] == [], "the default rules run on the demo's data"
    finally:
        demo.send_signal(signal.SIGINT)
        rest, _ = demo.communicate(timeout=60)
    assert demo.returncode == 0, "".join(lines) + rest
    assert "stopped." in rest
    assert postmaster_pids(data_dir) == [], "no process may outlive the demo"
    assert not data_dir.exists(), "the temporary data directory is removed"
