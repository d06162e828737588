"""The `gpuscope` command line: the sim exporter end to end, and clear errors for bad input."""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from gpuscope import cli
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
        (["demo", "--nodes", "x"], "--nodes: must be a whole number, got 'x'"),
        (["demo", "--interval", "fast"], "--interval: must be a number, got 'fast'"),
        (["exporter", "--backend", "sim", "--listen", "127.0.0.1:99999"], "port 99999 is not a TCP port (0-65535)"),
        (["collector", "--db", "foo", "--listen", "127.0.0.1:0"], "--db is not a PostgreSQL connection string"),
        (
            ["collector", "--db", "postgresql://u:hunter2@127.0.0.1:9/x", "--listen", "127.0.0.1:0"],
            "cannot connect to the database given with --db",
        ),
    ],
)
def test_bad_input_gets_a_clear_error(args: list[str], needle: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert needle in result.stderr
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr
    assert sum("error" in line.lower() for line in result.stderr.splitlines()) == 1, result.stderr


def test_auto_without_gpus_says_so_once_and_suggests_the_simulator() -> None:
    result = run("exporter", "--backend", "auto", "--listen", "127.0.0.1:0", "--ib-root", "/nonexistent")
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if "error:" in line]
    assert "auto: auto:" not in error and "--backend sim" in error, error


def test_every_option_of_every_command_is_explained() -> None:
    commands = next(a for a in cli._parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in commands.choices.items():
        for action in parser._actions:
            if action.option_strings and action.help != argparse.SUPPRESS:
                assert action.help, f"gpuscope {name} {action.option_strings[-1]} has no help text"
