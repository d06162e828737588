"""The `gpuscope` command line: the sim exporter end to end, and clear errors for bad input."""

from __future__ import annotations

import argparse
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
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
        (
            ["alerts", "silence", "list", "--collector", "http://127.0.0.1:9"],
            "cannot reach a collector at http://127.0.0.1:9 (Connection refused): start one, or pass --collector URL",
        ),
        (["alerts", "silence", "expire", "7", "--collector", "127.0.0.1:9410"], "must be a URL starting with http://"),
        (
            ["dashboard", "--db", "postgresql://u:hunter2@127.0.0.1:9/x", "--data-dir", "/nonexistent"],
            "--db and --data-dir both say where the database is: give one of them",
        ),
        (
            ["dashboard", "--data-dir", "/nonexistent", "--db-password-file", "/nonexistent/password"],
            "--db-password-file goes with --db: with --data-dir the password is read from /nonexistent",
        ),
        (
            ["dashboard", "--data-dir", "/nonexistent", "--listen", "127.0.0.1:0"],
            "no embedded database in /nonexistent (cannot read pg-dsn: No such file or directory): start "
            "`gpuscope collector --data-dir /nonexistent` (without --db) first",
        ),
        (["demo", "--dashboard-port", "9999", "--collector-port", "9999"], "both 9999: give two ports"),
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


def commands(parser: argparse.ArgumentParser, name: str = "gpuscope") -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command and subcommand (`gpuscope alerts silence add`...) with its parser, all its options
    added (a service's are made from its settings when first needed)."""
    if isinstance(parser, cli._Parser):
        parser.with_all_flags()
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from commands(sub, f"{name} {sub_name}")


def test_every_option_of_every_command_is_explained() -> None:
    for name, parser in commands(cli._parser()):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction) or action.help == argparse.SUPPRESS:
                continue
            assert action.help, f"{name} {(action.option_strings or [action.dest])[-1]} has no help text"


def test_help_cites_only_files_the_repository_has() -> None:
    """`gpuscope --help` once pointed at a DESIGN.md that did not exist."""
    root = Path(__file__).resolve().parents[1]
    for name, parser in commands(cli._parser()):
        for cited in re.findall(r"[\w./-]+\.md\b|\bdocs/[\w./-]*", parser.format_help()):
            assert (root / cited).exists() or (root / "docs" / cited).exists(), f"{name} --help cites {cited}"


def test_silence_commands_name_their_default_collector() -> None:
    for action in ("add", "expire", "list"):
        help_text = run("alerts", "silence", action, "--help").stdout
        assert "collector base URL (default http://127.0.0.1:9410)" in " ".join(help_text.split()), help_text


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port on 127.0.0.1 that something listens on."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield int(listener.getsockname()[1])


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (
            ["demo", "--dashboard-port", "{port}", "--collector-port", "0"],
            "(another gpuscope demo?): stop it, or pass --dashboard-port/--collector-port",
        ),
        (
            ["demo", "--collector-port", "{port}", "--dashboard-port", "0"],
            "(another gpuscope demo?): stop it, or pass --dashboard-port/--collector-port",
        ),
        (
            ["dashboard", "--db", "postgresql://u@127.0.0.1:9/x", "--listen", "127.0.0.1:{port}"],
            "(another gpuscope dashboard?): stop it, or pass --listen HOST:PORT",
        ),
        (
            ["collector", "--db", "postgresql://u@127.0.0.1:9/x", "--listen", "127.0.0.1:{port}"],
            "(another gpuscope collector?): stop it, or pass --listen HOST:PORT",
        ),
    ],
)
def test_a_port_in_use_is_one_line_before_anything_starts(taken_port: int, args: list[str], hint: str) -> None:
    result = run(*(arg.format(port=taken_port) for arg in args))
    assert result.returncode == 2
    expected = f"gpuscope {args[0]}: error: port {taken_port} on 127.0.0.1 is in use {hint}"
    assert result.stderr.splitlines() == [expected], result.stderr
