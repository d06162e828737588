"""A collector on a Patroni cluster across a switchover (tests/patroni/cluster.py), through the real
ingest API:
- left on a server that became a standby, it says so: ingest answers 503 with the reason at once,
  /healthz is unhealthy, and it takes writes again, without a restart, once that server is the primary;
- on libpq's multi-host DSN (target_session_attrs=read-write) it follows the new primary without a
  restart, and every batch it acknowledged is stored exactly once."""

from __future__ import annotations

import time
import uuid

import httpx
import psycopg

from gpuscope.exporter.wire import Origin
from tests.patroni.cluster import PatroniCluster
from tests.patroni.ingest_helpers import gpu_of, send
from tests.processes import running_collector
from tests.waiting import eventually


def switch_over(cluster: PatroniCluster, leader: str, candidate: str) -> None:
    """Patroni's own switchover (REST API), then a cluster whole again with `candidate` its primary. In
    synchronous mode Patroni promotes only the synchronous standby: to reach another member, the mode is
    off for the switchover and on again after."""
    api = cluster._api(leader)
    other_than_sync = candidate != cluster.wait_for_sync_standby()
    if other_than_sync:
        set_synchronous_mode(cluster, api, False)
    response = httpx.post(f"{api}/switchover", json={"leader": leader, "candidate": candidate}, timeout=60)
    assert response.status_code == 200, response.text
    assert cluster.wait_for_primary(timeout=60) == candidate
    if other_than_sync:
        set_synchronous_mode(cluster, api, True)
    cluster.wait_healthy(timeout=90)


def set_synchronous_mode(cluster: PatroniCluster, api: str, on: bool) -> None:
    response = httpx.patch(f"{api}/config", json={"synchronous_mode": on}, timeout=30)
    assert response.status_code == 200, response.text
    eventually(lambda: (cluster.sync_standby() is not None) == on, timeout=30, interval=0.5, what=f"sync mode {on}")


def test_a_collector_left_on_a_standby_says_so_and_resumes_when_it_is_primary(
    patroni_cluster: PatroniCluster,
) -> None:
    cluster = patroni_cluster
    cluster.wait_healthy()
    first = cluster.wait_for_primary()
    other = cluster.wait_for_sync_standby()
    origin = Origin("ha", "r1", "standby-node", "sim", str(uuid.uuid4()))
    with running_collector(cluster.node_dsn(first)) as collector:  # one host: no libpq targeting
        assert send(collector, origin, 0).status_code == 200
        switch_over(cluster, first, other)

        def refused_as_standby() -> httpx.Response | None:
            answer = send(collector, origin, 1)
            return answer if answer.status_code == 503 and "standby" in answer.text else None

        refused = eventually(refused_as_standby, timeout=30, interval=0.5, what="ingest refusing: a standby")
        assert refused.headers.get("Retry-After"), "exporters are told when to come back"
        health = httpx.get(f"{collector.url}/healthz", timeout=10)
        assert health.status_code == 503 and health.json()["cause"] == "database is a standby", health.text

        switch_over(cluster, other, first)
        back = lambda: send(collector, origin, 1).status_code == 200  # noqa: E731
        eventually(back, timeout=30, interval=0.5, what="ingest back on the primary")
        assert httpx.get(f"{collector.url}/healthz", timeout=10).status_code == 200


def test_a_collector_on_the_multi_host_dsn_follows_a_switchover_and_loses_nothing(
    patroni_cluster: PatroniCluster,
) -> None:
    cluster = patroni_cluster
    cluster.wait_healthy()
    leader, candidate = cluster.wait_for_primary(), cluster.wait_for_sync_standby()
    origin = Origin("ha", "r1", "multi-host-node", "sim", str(uuid.uuid4()))
    acknowledged: set[int] = set()
    with running_collector(cluster.dsn()) as collector:
        for seq in range(20):
            assert send(collector, origin, seq).status_code == 200
            acknowledged.add(seq)
        switched_at = time.monotonic()
        switch_over(cluster, leader, candidate)
        back_after = None
        seq = 20
        while seq < 60:  # as an exporter does: the same seq again until it is acknowledged
            answer = send(collector, origin, seq)
            if answer.status_code == 200:
                acknowledged.add(seq)
                back_after = back_after or time.monotonic() - switched_at
                seq += 1
            else:
                assert answer.status_code == 503, answer.text
                time.sleep(0.2)
            assert time.monotonic() - switched_at < 120, "ingest did not come back"
    print(f"ingest back {back_after:.1f} s after the switchover began")
    with psycopg.connect(cluster.dsn()) as conn:
        batches = conn.execute(
            "SELECT count(*), count(DISTINCT seq) FROM ingest_batch b WHERE b.exporter_id = %s", (origin.exporter_id,)
        ).fetchone()
        samples = conn.execute(
            "SELECT count(*) FROM gpu_sample s JOIN gpu g USING (gpu_id) WHERE g.uuid = %s", (gpu_of(origin).uuid,)
        ).fetchone()
    assert batches == (len(acknowledged), len(acknowledged)), "each acknowledged batch once"
    assert samples == (len(acknowledged),)


def test_commits_that_cannot_finish_end_in_503_and_an_unhealthy_collector_never_a_hang(
    patroni_cluster: PatroniCluster,
) -> None:
    """The primary's Patroni dies: its sync standby is promoted after the leader key's lease, while the
    old server goes on as a primary whose commits wait for a standby that has left. A collector on it
    answers each batch within its write deadline (503) and /healthz says why."""
    cluster = patroni_cluster
    cluster.wait_healthy()
    old = cluster.wait_for_primary()
    origin = Origin("ha", "r1", "orphaned-node", "sim", str(uuid.uuid4()))
    with running_collector(cluster.node_dsn(old)) as collector:
        assert send(collector, origin, 0).status_code == 200
        cluster.kill_patroni(old)
        cluster.wait_for_primary(timeout=60, not_in={old})
        started = time.monotonic()
        answer = send(collector, origin, 1)
        took = time.monotonic() - started
        assert answer.status_code == 503 and "not stored within" in answer.text, answer.text
        assert took < 10, f"answered after {took:.1f} s: an exporter gives up at 10 s"
        health = httpx.get(f"{collector.url}/healthz", timeout=10)
        assert health.status_code == 503 and health.json()["cause"] == "commits not finishing", health.text
        cluster.restart_patroni(old)  # it demotes the old server: the cluster is whole for what follows
        cluster.wait_healthy(timeout=120)


def test_the_primary_killed_mid_ingest_through_two_collectors_loses_and_doubles_nothing(
    patroni_cluster: PatroniCluster,
) -> None:
    """Three exporters push through two collectors on the multi-host DSN, each batch retried with its seq
    until acknowledged (as the exporter's pusher does); the primary's postmaster is SIGKILLed meanwhile.
    Every acknowledged batch is stored once, and ingest is back within 30 s without a collector restart."""
    cluster = patroni_cluster
    cluster.wait_healthy()
    origins = [Origin("ha", "r1", f"kill-node-{n}", "sim", str(uuid.uuid4())) for n in range(3)]
    acknowledged: dict[str, set[int]] = {origin.exporter_id: set() for origin in origins}
    with running_collector(cluster.dsn()) as first, running_collector(cluster.dsn()) as second:
        collectors = (first, second)

        def push_round(seq: int) -> bool:
            """One batch from each exporter, through alternating collectors; whether all were taken."""
            taken = True
            for n, origin in enumerate(origins):
                if seq in acknowledged[origin.exporter_id]:
                    continue
                answer = send(collectors[(seq + n) % 2], origin, seq)
                if answer.status_code == 200:
                    acknowledged[origin.exporter_id].add(seq)
                else:
                    assert answer.status_code == 503, answer.text  # never a 500, never a hang (httpx: 30 s)
                    taken = False
            return taken

        for seq in range(10):
            assert push_round(seq)
        old = cluster.wait_for_primary()
        killed_at = time.monotonic()
        cluster.kill_postmaster(old)
        back_after = None
        seq = 10
        while seq < 30:
            if push_round(seq):
                if back_after is None and seq > 10:
                    back_after = time.monotonic() - killed_at
                seq += 1
            else:
                time.sleep(0.2)
            assert time.monotonic() - killed_at < 90, "ingest did not come back"
    assert back_after is not None and back_after < 30, back_after
    print(f"ingest back {back_after:.1f} s after the primary's postmaster was killed")
    with psycopg.connect(cluster.dsn()) as conn:
        for origin in origins:
            seqs = [row[0] for row in conn.execute(
                "SELECT seq FROM ingest_batch WHERE exporter_id = %s ORDER BY seq", (origin.exporter_id,)
            )]  # fmt: skip
            assert seqs == sorted(acknowledged[origin.exporter_id]), "each acknowledged batch once, none lost"
            samples = conn.execute(
                "SELECT count(*) FROM gpu_sample s JOIN gpu g USING (gpu_id) WHERE g.uuid = %s", (gpu_of(origin).uuid,)
            ).fetchone()
            assert samples == (len(seqs),)
    cluster.wait_healthy(timeout=120)  # the killed node rejoins as a standby
