"""Each fault case gets a collector of its own over an embedded database in a fresh directory (not
pytest's tmp_path: as root the server runs as 'postgres', which cannot pass through tmp_path's parents)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.harness import Collector


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpuscope-fault-"))
    path.chmod(0o711)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def collector(data_dir: Path) -> Iterator[Collector]:
    running = Collector.start(data_dir / "collector", "--no-alerts")
    try:
        yield running
    finally:
        if running.process is not None and running.process.poll() is None:
            running.stop()
