"""A primary whose commits wait for a synchronous standby that is gone (what a Patroni primary left
behind by a failover does), without Patroni: server A is told its commits need a standby named 'ghost',
server B is a working primary, and the collector's DSN lists A first (libpq takes A: both say they are
not in recovery). The write deadline answers 503; the watch sees this collector's commits stuck on A,
fences A and ends its sessions there, and ingest goes on through B without a restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import psycopg
import psycopg.sql
import pytest

from gpuscope.collector.store.availability import DatabaseStatus
from gpuscope.collector.store.migrate import migrate
from gpuscope.collector.store.route import Route
from gpuscope.collector.store.watch import STUCK_S, watch_database
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.exporter.wire import Origin
from tests.conftest import running_postgres, server_dir
from tests.patroni.ingest_helpers import send
from tests.processes import running_collector


@pytest.fixture
def two_primaries() -> Iterator[tuple[EmbeddedPostgres, EmbeddedPostgres]]:
    with server_dir("gpuscope-stuck-a-") as data_dir, running_postgres("gpuscope-stuck-b-") as b:
        a = EmbeddedPostgres(data_dir)  # synchronous_commit on (the tests' servers run with it off)
        a.start()
        try:
            for server in (a, b):
                migrate(server.dsn)
            given = psycopg.conninfo.conninfo_to_dict(a.dsn)  # one DSN for both: B takes A's password
            with psycopg.connect(b.dsn, autocommit=True) as conn:
                conn.execute(
                    psycopg.sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        psycopg.sql.Identifier(str(given["user"])), psycopg.sql.Literal(str(given["password"]))
                    )
                )
            yield a, b
        finally:
            a.stop()


def test_commits_stuck_on_the_first_host_move_to_the_next(two_primaries: tuple[EmbeddedPostgres, ...]) -> None:
    a, b = two_primaries
    port_a, port_b = (psycopg.conninfo.conninfo_to_dict(s.dsn)["port"] for s in (a, b))
    dsn = psycopg.conninfo.make_conninfo(a.dsn, host="127.0.0.1,127.0.0.1", port=f"{port_a},{port_b}")
    dsn = psycopg.conninfo.make_conninfo(dsn, target_session_attrs="read-write")
    origin = Origin("ha", "r1", "stuck-node", "sim", str(uuid.uuid4()))
    with running_collector(dsn) as collector:
        assert send(collector, origin, 0).status_code == 200
        assert _batches(a.dsn, origin) == 1, "A (listed first) takes the writes"
        with psycopg.connect(a.dsn, autocommit=True) as conn:  # A's synchronous standby is gone
            conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
            conn.execute("SELECT pg_reload_conf()")
        stuck_at = time.monotonic()
        answers: list[int] = []
        reasons: set[str] = set()
        seq = 1
        while seq < 6:  # an exporter: the same seq until acknowledged
            answer = send(collector, origin, seq)
            answers.append(answer.status_code)
            if answer.status_code == 200:
                seq += 1
            else:
                assert answer.status_code == 503, answer.text
                reasons.add(answer.json()["detail"].split(":")[0])
                time.sleep(0.5)
            assert time.monotonic() - stuck_at < 60, f"ingest did not move to B: {answers}"
        back = time.monotonic() - stuck_at
        assert 503 in answers, "the stuck commit was answered, not left hanging"
        # The stuck request ended with its session, then refused while A is fenced (or at the deadline).
        assert reasons and reasons <= {"database unreachable", "commits not finishing", "database not answering"}
        assert httpx.get(f"{collector.url}/healthz", timeout=10).status_code == 200
    print(f"ingest back on B {back:.1f} s after A's commits got stuck; answers {answers}")
    assert back < 30
    b_dsn = psycopg.conninfo.make_conninfo(a.dsn, port=port_b)  # B's password is A's now
    assert _batches(b_dsn, origin) >= 4, "the later batches were stored on B"
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        stuck = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND usename = current_user"
        ).fetchone()
        conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
        conn.execute("SELECT pg_reload_conf()")
    assert stuck == (0,), "the sessions stuck on A were ended"


def _batches(dsn: str, origin: Origin) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT count(*) FROM ingest_batch WHERE exporter_id = %s", (origin.exporter_id,)).fetchone()
    return int(row[0]) if row else 0


def test_stuck_commits_with_no_other_primary_are_not_fenced(
    two_primaries: tuple[EmbeddedPostgres, ...], caplog: pytest.LogCaptureFixture
) -> None:
    """The only primary's standby is gone (or slow): nothing else takes writes, so nothing is fenced and
    no session ended; the commits wait, their batches get the write deadline's 503."""
    a, _ = two_primaries
    port_a = psycopg.conninfo.conninfo_to_dict(a.dsn)["port"]
    dsn = psycopg.conninfo.make_conninfo(a.dsn, host="127.0.0.1,127.0.0.1", port=f"{port_a},9")  # 9: nobody
    with psycopg.connect(a.dsn, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET synchronous_standby_names = 'ghost'")
        conn.execute("SELECT pg_reload_conf()")
    writer = threading.Thread(target=_commit, args=(a.dsn,), daemon=True)
    writer.start()

    async def watch_for(seconds: float) -> DatabaseStatus:
        status = DatabaseStatus()

        async def nothing() -> None:
            pass

        task = asyncio.create_task(watch_database(Route(dsn), status, nothing, every_s=0.2))
        await asyncio.sleep(seconds)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return status

    try:
        with caplog.at_level(logging.ERROR, "gpuscope.collector.store.watch"):
            status = asyncio.run(watch_for(STUCK_S + 3))
        assert "no other host of the DSN is a primary" in caplog.text
        assert status.refuses_writes() is None, "not fenced: writes are tried (and meet their deadline)"
        with psycopg.connect(a.dsn, autocommit=True) as conn:
            waiting = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").fetchone()
        assert waiting == (1,), "the waiting commit's session was left alone"
    finally:
        with psycopg.connect(a.dsn, autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET synchronous_standby_names")
            conn.execute("SELECT pg_reload_conf()")
        writer.join(timeout=10)


def _commit(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS stuck_probe (x int)")
