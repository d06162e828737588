"""The ingest benchmark's load generator against a real collector (the measuring is `gpuscope bench`)."""

from __future__ import annotations

import asyncio
import urllib.parse

from gpuscope.bench import ingest
from gpuscope.bench.loadgen import push_all
from tests.conftest import count_rows
from tests.processes import RunningCollector


def test_load_generator_delivers_every_batch_in_order_once(collector: RunningCollector) -> None:
    nodes = ingest._batches(nodes=6, batches_per_node=3)
    url = urllib.parse.urlsplit(collector.url)
    result = asyncio.run(push_all(url.hostname or "", url.port or 0, collector.token, nodes, 4, ingest.CONTENT))
    assert result.statuses == {200: 18} and result.failures == 0
    assert result.rows == 18 * 80 == count_rows(collector.dsn, "gpu_sample")
    assert count_rows(collector.dsn, "ingest_batch") == 18
