"""`gpuscope collector --workers 2`: two processes on one port, both serving, every batch stored once,
and SIGTERM stopping them all."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
from pathlib import Path

from gpuscope.bench import ingest
from gpuscope.bench.loadgen import push_all
from gpuscope.core.listen import free_loopback_port
from tests.commands import GPUSCOPE, token_file, wait_healthy
from tests.conftest import count_rows


def two_workers(dsn: str, port: int, token_path: str) -> list[str]:
    """The command line of a two-process collector on 127.0.0.1:port."""
    listen = f"127.0.0.1:{port}"
    return [*GPUSCOPE, "collector", "--db", dsn, "--listen", listen, "--workers", "2", "--token-file", token_path]


def children(pid: int) -> list[int]:
    """Worker processes of `pid` (not multiprocessing's resource tracker)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and b"resource_tracker" not in (stat.parent / "cmdline").read_bytes():
            found.append(int(stat.parent.name))
    return found


def test_two_workers_share_the_port_and_stop_together(dsn: str, tmp_path: Path) -> None:
    token = "t" * 32
    tokens = token_file(tmp_path / "token", token)
    port = free_loopback_port()
    collector = subprocess.Popen(
        two_workers(dsn, port, str(tokens)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout=60, process=collector)
        workers = children(collector.pid)
        assert len(workers) == 2
        nodes = ingest._batches(nodes=40, batches_per_node=3)
        result = asyncio.run(push_all("127.0.0.1", port, token, nodes, 40, ingest.CONTENT))
        assert result.statuses == {200: 120}
        assert count_rows(dsn, "gpu_sample") == 120 * 80 and count_rows(dsn, "ingest_batch") == 120
        collector.send_signal(signal.SIGTERM)
        assert collector.wait(30) == 0
        assert not [pid for pid in workers if Path(f"/proc/{pid}").exists()], "no worker left behind"
    finally:
        if collector.poll() is None:
            collector.kill()


def test_port_in_use_fails_in_one_clear_line(dsn: str, tmp_path: Path) -> None:
    tokens = token_file(tmp_path / "token", "t" * 32)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            two_workers(dsn, port, str(tokens)),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 2
    # Checked before anything starts (gpuscope/core/ports.py); the bind itself says "cannot listen on" if
    # the port is taken between the check and the bind.
    assert f"port {port} on 127.0.0.1 is in use" in result.stderr and "--listen" in result.stderr
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
