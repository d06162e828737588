"""The embedded server's supervisor: a server that dies is reaped and started again; one that cannot
start says so (problem(), one CRITICAL line once it is a crash loop) and comes back by itself once the
cause is gone."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterator

import psycopg
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.pg_supervisor import Supervisor
from tests.conftest import running_postgres
from tests.waiting import eventually


@pytest.fixture
def server() -> Iterator[EmbeddedPostgres]:
    with running_postgres("gpuscope-test-supervisor-") as running:
        yield running


def postmaster(server: EmbeddedPostgres) -> int:
    return int((server.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])


def answers(server: EmbeddedPostgres) -> bool:
    with psycopg.connect(server.dsn, connect_timeout=2) as conn:
        return conn.execute("SELECT 1").fetchone() == (1,)


def test_a_killed_server_is_reaped_and_started_again(server: EmbeddedPostgres) -> None:
    supervisor = Supervisor(server)
    supervisor.start()
    try:
        victim = postmaster(server)
        os.kill(victim, signal.SIGKILL)
        eventually(lambda: supervisor.restarts == 1 and answers(server), what="the server back", timeout=15,
                   ignoring=(AssertionError, psycopg.OperationalError))  # fmt: skip
        assert supervisor.problem() is None
        with pytest.raises(ProcessLookupError):
            os.kill(victim, 0)  # reaped: not even a zombie
    finally:
        supervisor.stop()


def test_a_crash_loop_is_loud_and_ends_when_its_cause_does(
    server: EmbeddedPostgres, caplog: pytest.LogCaptureFixture
) -> None:
    supervisor = Supervisor(server, first_retry_s=0.1, retry_cap_s=0.5, crash_loop_tries=3)
    supervisor.start()
    settings = server.pgdata / "postgresql.auto.conf"
    good = settings.read_text()
    try:
        with caplog.at_level(logging.ERROR, logger="gpuscope.core.pg_supervisor"):
            settings.write_text(good + "shared_buffers = 'plenty'\n")  # the server refuses to start on this
            os.kill(postmaster(server), signal.SIGKILL)
            eventually(lambda: "restarts failed" in (supervisor.problem() or ""), what="the failures said", timeout=15)
            eventually(lambda: any(r.levelno == logging.CRITICAL for r in caplog.records), what="a CRITICAL line")
        critical = [r.getMessage() for r in caplog.records if r.levelno == logging.CRITICAL]
        assert len(critical) == 1 and "keeps failing to start" in critical[0], critical
        assert "postgresql.auto.conf" in critical[0] and "postgres.log" in critical[0], "the cause and where to look"
        assert "postgresql.auto.conf" in (supervisor.problem() or "")
        settings.write_text(good)  # the operator's fix; nobody restarts anything
        eventually(lambda: supervisor.problem() is None and answers(server), what="the server back", timeout=15,
                   ignoring=(AssertionError, psycopg.OperationalError))  # fmt: skip
    finally:
        settings.write_text(good)
        supervisor.stop()
