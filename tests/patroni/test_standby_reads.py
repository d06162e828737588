"""The read API on a standby (--read-db with target_session_attrs=prefer-standby) under a real Patroni
cluster: reads leave the primary to ingest, and what they see is the standby's, as far behind the primary
as its replay is. /metrics says which server the reads are on and how far behind it is."""

from __future__ import annotations

import re
import time
import uuid

import httpx
import psycopg

from tests.patroni.cluster import NODES, PatroniCluster
from tests.patroni.config import DATABASE
from tests.patroni.test_collector_failover import send
from tests.processes import RunningCollector, running_collector
from tests.waiting import eventually

READ_POOL_NAME = "gpuscope collector reads"  # collector/main.py


def test_the_read_api_reads_from_a_standby_and_shows_its_lag(patroni_cluster: PatroniCluster) -> None:
    cluster = patroni_cluster
    cluster.wait_healthy()
    primary, sync = cluster.wait_for_primary(), cluster.wait_for_sync_standby()
    (asynchronous,) = [name for name in NODES if name not in (primary, sync)]
    # The asynchronous standby first: freezing its replay holds no commit back (the synchronous one's
    # would, with remote_apply).
    hosts = ",".join(f"127.0.0.1:{cluster.nodes[name].pg_port}" for name in (asynchronous, sync, primary))
    read_dsn = f"{cluster.dsn().split('@')[0]}@{hosts}/{DATABASE}?target_session_attrs=prefer-standby"
    node = f"standby-reads-{uuid.uuid4().hex[:6]}"
    with running_collector(cluster.dsn(), read_db=read_dsn) as collector:
        known = _gpus_known(collector)
        assert send(collector, _origin(node, 0), 0).status_code == 200
        eventually(lambda: _gpus_known(collector) == known + 1, what="the new GPU read back", timeout=15)
        assert _readers_on(cluster, asynchronous) > 0, "the read API's connections are on the standby"
        assert _readers_on(cluster, primary) == 0, "and none on the primary"
        assert _metric(collector, "gpuscope_collector_read_standby") == 1.0

        with cluster.replay_frozen(asynchronous):
            assert send(collector, _origin(node, 1), 0).status_code == 200  # stored on the primary
            frozen_at = time.monotonic()
            while time.monotonic() - frozen_at < 2.0:  # the standby is behind: reads do not see it yet
                assert _gpus_known(collector) == known + 1
                time.sleep(0.2)
            lag = _metric(collector, "gpuscope_collector_read_lag_seconds")
            assert lag is not None and lag >= 2.0, lag
        eventually(lambda: _gpus_known(collector) == known + 2, what="the standby caught up", timeout=15)
        caught_up = _metric(collector, "gpuscope_collector_read_lag_seconds")
        assert caught_up is not None and caught_up < lag


def test_read_db_needs_db() -> None:
    from gpuscope.collector_process import CollectorSettings, check_inputs

    settings = CollectorSettings(read_db="postgresql://127.0.0.1:1/x?target_session_attrs=prefer-standby")
    try:
        check_inputs(settings)
    except ValueError as exc:
        assert "--read-db needs --db" in str(exc)
    else:
        raise AssertionError("--read-db without --db was accepted")


def _origin(node: str, gpu: int):  # type: ignore[no-untyped-def]
    from gpuscope.exporter.wire import Origin

    return Origin("ha", "r1", f"{node}-{gpu}", "sim", str(uuid.uuid4()))


def _gpus_known(collector: RunningCollector) -> int:
    response = httpx.get(f"{collector.url}/api/v1/fleet", timeout=10)
    response.raise_for_status()
    return int(response.json()["gpus_known"])


def _readers_on(cluster: PatroniCluster, name: str) -> int:
    with psycopg.connect(cluster.node_dsn(name, "postgres"), connect_timeout=3) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (READ_POOL_NAME,))
        found = row.fetchone()
    return int(found[0]) if found else 0


def _metric(collector: RunningCollector, name: str) -> float | None:
    text = httpx.get(f"{collector.url}/metrics", timeout=10).text
    found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else None
