"""/metrics under `gpuscope collector --workers 2`: whichever worker a scrape reaches, it counts every
batch both workers took (each used to show its own share only), and the folder where the workers keep
their figures is private to the run and gone once it stops."""

from __future__ import annotations

import asyncio
import re
import signal
import stat
import subprocess
from pathlib import Path

import httpx

from gpuscope.bench import ingest
from gpuscope.bench.loadgen import push_all
from gpuscope.core.listen import free_loopback_port
from tests.collector.test_workers import children, two_workers
from tests.commands import token_file, wait_healthy

NODES, BATCHES_PER_NODE = 40, 3
BATCHES = NODES * BATCHES_PER_NODE
SCRAPES = 30


def _value(text: str, series: str) -> float:
    """The value of `series` (name and labels, as written) in a Prometheus text exposition."""
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert found, f"{series} not in /metrics:\n{text}"
    return float(found.group(1))


def _metrics_dir(pid: int) -> Path:
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    named = [v.split(b"=", 1)[1] for v in environ if v.startswith(b"PROMETHEUS_MULTIPROC_DIR=")]
    assert len(named) == 1, "the worker runs without a shared metrics folder"
    return Path(named[0].decode())


def test_every_scrape_counts_the_batches_of_all_workers(dsn: str, tmp_path: Path) -> None:
    token = "t" * 32
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    collector = subprocess.Popen(
        two_workers(dsn, port, str(token_file(tmp_path / "token", token))),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(url, timeout=60, process=collector)
        workers = children(collector.pid)
        assert len(workers) == 2
        folders = {_metrics_dir(pid) for pid in workers}
        assert len(folders) == 1, "both workers write to one folder"
        (folder,) = folders
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700

        nodes = ingest._batches(nodes=NODES, batches_per_node=BATCHES_PER_NODE)
        result = asyncio.run(push_all("127.0.0.1", port, token, nodes, NODES, ingest.CONTENT))
        assert result.statuses == {200: BATCHES}

        seen = []
        for _ in range(SCRAPES):
            # A new connection each time, so the kernel spreads the scrapes over both workers.
            with httpx.Client(timeout=10) as client:
                text = client.get(f"{url}/metrics").text
            seen.append(_value(text, 'gpuscope_collector_batches_total{result="stored"}'))
            assert _value(text, "gpuscope_collector_ingest_seconds_count") == BATCHES
            assert _value(text, 'gpuscope_collector_rows_total{kind="gpu"}') == BATCHES * 80
        assert seen == [BATCHES] * SCRAPES

        collector.send_signal(signal.SIGTERM)
        assert collector.wait(30) == 0, collector.stderr.read() if collector.stderr else ""
        assert not folder.exists(), "the metrics folder outlived the collector"
    finally:
        if collector.poll() is None:
            collector.kill()
            collector.wait()
