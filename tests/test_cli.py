"""The `gpuscope` command line: the sim exporter end to end, and clear errors for bad input."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.commands import GPUSCOPE, token_file
from tests.conftest import count_rows
from tests.processes import RunningCollector
from tests.waiting import eventually


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=60, check=False)


def test_sim_exporter_serves_metrics_and_pushes(collector: RunningCollector, tmp_path: Path) -> None:
    tokens = token_file(tmp_path / "token", collector.token)
    exporter = subprocess.Popen(
        [
            *GPUSCOPE,
            "exporter",
            "--backend",
            "sim",
            "--listen",
            "127.0.0.1:0",
            "--push",
            collector.url,
            "--token-file",
            str(tokens),
            "--interval",
            "0.2",
            "--push-interval",
            "0.5",
            "--node",
            "cli-node",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert exporter.stderr is not None
        line = ""
        for line in exporter.stderr:
            if "serving http://" in line:
                break
        url = re.search(r"(http://127\.0\.0\.1:\d+/metrics)", line).group(1)  # type: ignore[union-attr]
        assert "gpuscope_gpu_power_watts" in httpx.get(url, timeout=5).text
        eventually(
            lambda: count_rows(collector.dsn, "gpu_sample") >= 16, timeout=15, interval=0.2, what="two pushed snapshots"
        )
    finally:
        exporter.send_signal(signal.SIGTERM)
        exporter.wait(30)
    assert exporter.returncode == 0
    assert count_rows(collector.dsn, "gpu_sample") >= 16
    assert collector.token not in (exporter.stderr.read() if exporter.stderr else "")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["exporter", "--backend", "nvml", "--listen", "127.0.0.1:0"], "NVIDIA driver installed"),
        (["exporter", "--backend", "sim", "--push", "http://127.0.0.1:9"], "--token-file"),
        (["exporter", "--backend", "sim", "--listen", "nonsense"], "HOST:PORT"),
        (
            ["exporter", "--backend", "sim", "--push", "http://127.0.0.1:9", "--token-file", "/nonexistent"],
            "cannot read",
        ),
        (["demo", "--nodes", "0"], "must be >= 1"),
        (["demo", "--dashboard-port", "70000"], "TCP port"),
        (["exporter", "--interval", "-1"], "must be > 0"),
        (
            ["collector", "--db", "postgresql://127.0.0.1:9/x", "--retention-days", "60", "--minute-rollup-days", "7"],
            "minute rollups must be kept at least as long as raw samples",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(args: list[str], needle: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_the_commands() -> None:
    result = run("--help")
    assert result.returncode == 0
    for command in ("demo", "exporter", "collector", "dashboard"):
        assert command in result.stdout
