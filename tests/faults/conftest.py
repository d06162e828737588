"""Each fault case gets a collector of its own over an embedded database in a fresh directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import server_dir
from tests.faults.harness import Collector


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with server_dir("gpuscope-fault-") as path:
        yield path


@pytest.fixture
def collector(data_dir: Path) -> Iterator[Collector]:
    running = Collector.start(data_dir / "collector", "--no-alerts")
    try:
        yield running
    finally:
        if running.process is not None and running.process.poll() is None:
            running.stop()
