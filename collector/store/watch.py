"""The database watch: one connection of its own, asking every second whether the server is in
recovery, so an outage is known within a couple of seconds whether or not anyone writes, and its end is
known at once. A server in recovery is a standby (after a failover, or a DSN naming the wrong host): it
counts as away for writes, and the watch connects afresh through the DSN each second, which finds the
primary wherever a multi-host DSN lists it (target_session_attrs=read-write or primary).

When an outage ends, the pools drop every connection they hold (drain): those that broke meanwhile would
fail the first batches on a dead socket, and those on a demoted server would be refused.

A server can go and come back between two probes (an embedded server restarted by its supervisor in
under a second). The watch's own connection is then broken though the server is up: the probe tries a
fresh one before it calls the database away, and drains the pools all the same, since theirs broke too.

A primary whose commits wait for a synchronous standby that is gone (its Patroni died, and the standby
was promoted elsewhere) still says it is not in recovery. The probe also asks whether this role's
sessions there have waited on a synchronous standby for more than STUCK_S, and if so asks the DSN's
other hosts directly whether one is a primary. Only then is this one a primary left behind: writes are
refused at once, the host is fenced (store/route.py: every connection made afterwards goes elsewhere,
so the new primary is found), the pools drained and the role's sessions there ended (their batches come
again). A fenced host is checked aside each second and comes back once it is a standby (Patroni demoted
it), stops answering, or is the only primary left. With no other primary nothing is fenced: the
batches get the write deadline's 503 until the commits finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from gpuscope.collector.store.availability import Cause, CommitsStuck, DatabaseStatus, StandbyDatabase
from gpuscope.collector.store.route import Route, one_host

log = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 2.0  # a server that has not answered `SELECT 1` in this long is not taking writes either
GONE_CHECKS = 3  # a fenced host that answers none of this many checks in a row is gone
# A synchronous commit takes milliseconds; one that has waited this long for its standby is stuck, or
# its standby far behind (then no other host is a primary, and nothing is fenced). Short, since it adds
# to every failover that leaves a primary behind.
STUCK_S = 5.0

# In recovery; and this role's sessions whose statement (a COMMIT) has waited on a synchronous standby
# past STUCK_S (its own sessions' rows are visible to a role without pg_monitor).
_PROBE_SQL = (
    "SELECT pg_is_in_recovery(), array(SELECT pid FROM pg_stat_activity WHERE wait_event = 'SyncRep'"
    " AND usename = current_user AND now() - query_start > %s * interval '1 second')"
)


async def watch_database(
    route: Route | str,
    status: DatabaseStatus,
    on_recovery: Callable[[], Awaitable[None]],
    every_s: float = 1.0,
) -> None:
    # The probe runs as a task of its own, and is never cancelled: cancelling a query on a server that
    # does not answer makes psycopg wait for the cancel request too. A probe that is late marks the
    # database unreachable; the next one starts only once it has finished (or failed).
    route = Route(route) if isinstance(route, str) else route
    probe: asyncio.Task[tuple[psycopg.AsyncConnection[Any], bool]] | None = None
    conn: psycopg.AsyncConnection[Any] | None = None
    check: asyncio.Task[dict[tuple[str, str], str]] | None = None  # the fenced hosts, asked aside
    gone: dict[tuple[str, str], int] = {}  # fenced hosts' unanswered checks in a row
    told: set[tuple[str, str]] = set()  # hosts whose stuck commits were logged in this episode
    try:
        while True:
            if probe is None:
                probe = asyncio.create_task(_probe(route.dsn(), conn), name="database probe")
            done, _ = await asyncio.wait({probe}, timeout=PROBE_TIMEOUT_S)
            if not done:
                _failed(status, TimeoutError(f"no answer to a probe in {PROBE_TIMEOUT_S:g} s"))
            else:
                try:
                    conn, reconnected = probe.result()
                except CommitsStuck as stuck:
                    conn, probe = None, None
                    if await _another_primary(route, stuck):  # a primary left behind by a failover
                        _fence(route, status, stuck)  # first: no new write is tried there
                        await _recover(on_recovery)  # the pools' next connections go through the new route
                        await _end_sessions(route, stuck)
                    elif stuck.host_port not in told:  # once an episode: its batches get the deadline's 503
                        told.add(stuck.host_port)
                        log.error("%s; no other host of the DSN is a primary: writes wait for their deadline", stuck)
                    await asyncio.sleep(every_s)
                    continue
                except (psycopg.Error, OSError) as exc:
                    _failed(status, exc)
                    conn = None
                else:
                    told.clear()
                    recovered = status.reachable()
                    if recovered:
                        log.warning("database reachable again: ingest resumes")
                    elif reconnected:
                        log.warning("the database server went and came back between two probes")
                    if recovered or reconnected:
                        await _recover(on_recovery)
                probe = None
            if route.fenced and (check is None or check.done()):
                if check is not None and check.exception() is None:
                    _lift_fences(route, status, check.result(), gone)
                elif check is not None:  # a bug: logged, and the hosts asked again
                    log.error("asking the fenced hosts failed: %r", check.exception())
                check = asyncio.create_task(_check_fenced(route), name="fenced hosts") if route.fenced else None
            await asyncio.sleep(every_s)
    finally:
        for task in (probe, check):
            if task is not None:
                task.cancel()
        await _discard(conn)


async def _probe(dsn: str, conn: psycopg.AsyncConnection[Any] | None) -> tuple[psycopg.AsyncConnection[Any], bool]:
    """Whether the server behind the watch's connection (a new one if it has none or it broke) is the
    primary: the connection, and whether the one it had broke on a server that is up again. A standby:
    StandbyDatabase, the connection discarded."""
    if conn is not None and not conn.closed:
        try:
            return await _ask(conn), False
        except (StandbyDatabase, CommitsStuck):
            raise
        except (psycopg.OperationalError, OSError):  # broken: is the server away, or back already?
            pass
        return await _ask(await _connect(dsn)), True
    return await _ask(await _connect(dsn)), False


async def _ask(conn: psycopg.AsyncConnection[Any]) -> psycopg.AsyncConnection[Any]:
    try:
        cur = await conn.execute(_PROBE_SQL, (STUCK_S,))
        row = await cur.fetchone()
        host, port = conn.info.host, str(conn.info.port)
        if row is not None and row[0]:
            raise StandbyDatabase(f"{host}:{port} is in recovery and takes no writes")
        if row is not None and row[1]:
            raise CommitsStuck(
                f"{host}:{port}: {len(row[1])} commits waited over {STUCK_S:g} s for a synchronous standby"
                " (a primary left behind by a failover, or its standbys gone)",
                host,
                port,
            )
    except BaseException:
        await _discard(conn)
        raise
    return conn


def _fence(route: Route, status: DatabaseStatus, stuck: CommitsStuck) -> None:
    route.fence(stuck.host, stuck.port)
    log.error("%s; another host is a primary: connections go there until this one is a standby or gone", stuck)
    status.fence(str(stuck))


async def _another_primary(route: Route, stuck: CommitsStuck) -> bool:
    """Whether another host of the DSN is a primary, each asked directly: only then is the stuck one a
    primary left behind (fenced). Otherwise its standby is gone or slow, and nothing else takes writes."""
    answers = await _ask_hosts(route, route.others(stuck.host, stuck.port))
    return "primary" in answers.values()


async def _check_fenced(route: Route) -> dict[tuple[str, str], str]:
    return await _ask_hosts(route, sorted(route.fenced))


async def _ask_hosts(route: Route, hosts: list[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """Each host's role: "primary", "standby" or "gone". Asked at once, each bounded by its connect
    timeout and the server's statement timeout: the tasks are never cancelled (a cancelled query waits
    for its cancel request), a late one is called gone."""
    tasks = {host: asyncio.create_task(_role(one_host(route.full, *host))) for host in hosts}
    if tasks:
        await asyncio.wait(tasks.values(), timeout=2 * PROBE_TIMEOUT_S)
    return {host: task.result() if task.done() else "gone" for host, task in tasks.items()}


async def _role(dsn: str) -> str:
    try:
        conn = await psycopg.AsyncConnection.connect(
            dsn, autocommit=True, connect_timeout=int(PROBE_TIMEOUT_S), options="-c statement_timeout=2000"
        )
    except (psycopg.Error, OSError):
        return "gone"
    try:
        row = await (await conn.execute("SELECT pg_is_in_recovery()")).fetchone()
        return "standby" if row and row[0] else "primary"
    except (psycopg.Error, OSError):
        return "gone"
    finally:
        await _discard(conn)


async def _end_sessions(route: Route, stuck: CommitsStuck) -> None:
    """End this role's sessions on the server whose commits are stuck (other collectors' too): their
    batches were answered 503 at the deadline and come again, and their pool connections are freed. The
    other sessions first, then those waiting on the standby: once those end, their commits become
    visible there, and a retry of the same batch still running on that server would take it for stored
    and acknowledge it, though the server's timeline is to be rewound. No new write starts there: the
    fence is up and the pools were drained."""
    dsn = one_host(route.full, stuck.host, stuck.port)
    try:
        async with await asyncio.wait_for(_connect(dsn), PROBE_TIMEOUT_S) as conn:
            for waiting in (False, True):
                await conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = current_user"
                    " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
                    " AND (wait_event IS NOT DISTINCT FROM 'SyncRep') = %s",
                    (waiting,),
                )
    except (psycopg.Error, OSError, TimeoutError) as exc:
        log.warning("could not end the sessions on %s:%s: %s", stuck.host, stuck.port, exc)


def _lift_fences(
    route: Route, status: DatabaseStatus, roles: dict[tuple[str, str], str], gone: dict[tuple[str, str], int]
) -> None:
    """A fenced host back among the DSN's hosts once it is a standby (Patroni demoted it), or has not
    answered GONE_CHECKS checks in a row, or is a primary again while the other hosts hold none (the
    primary it was fenced for has gone: it is the only one left)."""
    for host, role in roles.items():
        gone[host] = gone.get(host, 0) + 1 if role == "gone" else 0
        if role == "standby":
            why = "a standby now"
        elif gone[host] >= GONE_CHECKS:
            why = f"unanswering in {GONE_CHECKS} checks"
        elif role == "primary" and status.current().cause is Cause.STANDBY:
            why = "the only primary left"
        else:
            continue
        route.unfence(*host)
        gone.pop(host, None)
        log.warning("%s:%s is %s: back among the DSN's hosts", *host, why)


async def _recover(on_recovery: Callable[[], Awaitable[None]]) -> None:
    try:
        await on_recovery()
    except Exception:  # gone again, say: the next probe tells; the watch goes on
        log.exception("dropping pooled connections failed")


def _failed(status: DatabaseStatus, exc: BaseException) -> None:
    before = status.current()
    after = status.failed(exc)
    if before.ok and not after.ok:
        log.error("%s", after.reason)


async def _connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(
        dsn, autocommit=True, connect_timeout=int(PROBE_TIMEOUT_S), application_name="gpuscope database watch"
    )


async def _discard(conn: psycopg.AsyncConnection[Any] | None) -> None:
    if conn is not None:
        with contextlib.suppress(psycopg.Error, TimeoutError, OSError):
            await asyncio.wait_for(conn.close(), 1.0)
