"""Dispatch over the real tables: the timers and the groups' bookkeeping kept in alert_group across
calls, a closed group deleted, silences created and expired in alert_silence, nothing queued twice
when the engine restarts, and the bookkeeping and the outbox row written in one transaction. The
decisions themselves (routing, grouping, inhibition, send_resolved, ...) are tested without a
database in test_decide.py."""

from __future__ import annotations

import asyncio
import datetime as dt

import psycopg
import pytest

from gpuscope.alerts import store
from gpuscope.alerts.config import NotifyConfig
from gpuscope.alerts.dispatch import dispatch
from gpuscope.alerts.matchers import parse_matcher
from gpuscope.alerts.state import Instance
from tests.alerts.instances import T0, alert, config


class World:
    """The engine's in-memory alerts, and dispatch at chosen times against the test database."""

    def __init__(self, dsn: str, cfg: NotifyConfig, t0: dt.datetime = T0) -> None:
        self.dsn, self.cfg, self.t0 = dsn, cfg, t0
        self.alerts: dict[str, Instance] = {}

    def set(self, *instances: Instance) -> None:
        for i in instances:
            self.alerts[i.fingerprint] = i

    def at(self, seconds: float) -> int:
        async def go() -> int:
            async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                return await dispatch(conn, self.alerts, self.cfg, self.t0 + dt.timedelta(seconds=seconds))

        return asyncio.run(go())

    def outbox(self) -> list[tuple[str, int, int, list[str]]]:
        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                "SELECT receiver, firing, resolved, message FROM alert_notification ORDER BY notification_id"
            ).fetchall()
        return [
            (r[0], r[1], r[2], sorted(f"{a['labels']['node']}:{a['status']}" for a in r[3]["alerts"])) for r in rows
        ]


def test_group_wait_then_group_interval_then_repeat(dsn: str) -> None:
    world = World(dsn, config())
    world.set(alert("Hot", "n1"), alert("Hot", "n2"))
    assert world.at(0) == 0 and world.at(29) == 0, "group_wait: 30 s to gather the group"
    assert world.at(30) == 1
    assert world.outbox() == [("ops", 2, 0, ["n1:firing", "n2:firing"])]
    world.set(alert("Hot", "n3", at=T0 + dt.timedelta(seconds=40)))
    assert world.at(40) == 0 and world.at(329) == 0, "a change waits for group_interval"
    assert world.at(330) == 1
    assert world.outbox()[-1] == ("ops", 3, 0, ["n1:firing", "n2:firing", "n3:firing"])
    assert world.at(331 + 3600) == 0
    assert world.at(330 + 4 * 3600) == 1, "unchanged and still firing: repeated after repeat_interval"
    assert len(world.outbox()) == 3


def test_resolved_alerts_are_announced_then_the_group_closes(dsn: str) -> None:
    world = World(dsn, config(group_wait="0s"))
    world.set(alert("Hot", "n1"), alert("Hot", "n2"))
    world.at(0)
    world.set(alert("Hot", "n1", state="resolved", at=T0 + dt.timedelta(seconds=60)))
    assert world.at(60) == 0 and world.at(300) == 1
    assert world.outbox()[-1] == ("ops", 1, 1, ["n1:resolved", "n2:firing"])
    world.set(alert("Hot", "n2", state="resolved", at=T0 + dt.timedelta(seconds=400)))
    assert world.at(600) == 1
    assert world.outbox()[-1] == ("ops", 0, 1, ["n2:resolved"])
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM alert_group").fetchone() == (0,), "the group is done"
    assert world.at(9000) == 0


def test_silences_mute_until_they_expire(dsn: str) -> None:

    async def silence() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            s = await store.create_silence(
                conn, [parse_matcher("node=n1")], dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), "test", "maintenance"
            )
            return s.silence_id

    async def expire(silence_id: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert await store.expire_silence(conn, silence_id) is not None

    silence_id = asyncio.run(silence())
    now = dt.datetime.now(dt.UTC)  # the silence started a moment ago
    world = World(dsn, config(group_wait="0s"), t0=now)
    world.set(alert("Hot", "n1", at=now))
    assert world.at(0) == 0, "silenced"
    asyncio.run(expire(silence_id))
    assert world.at((dt.datetime.now(dt.UTC) - now).total_seconds()) == 1
    assert world.outbox() == [("ops", 1, 0, ["n1:firing"])]


def test_a_restarted_engine_does_not_queue_again(dsn: str) -> None:
    cfg = config(group_wait="0s")
    first = World(dsn, cfg)
    first.set(alert("Hot", "n1"))
    assert first.at(0) == 1
    second = World(dsn, cfg)  # a new engine over the same database, with the same alerts loaded
    second.set(alert("Hot", "n1"))
    assert second.at(1) == 0 and second.at(299) == 0
    assert len(second.outbox()) == 1


def test_the_group_and_its_notification_are_written_together_or_not_at_all(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE 'outbox full'; END $$;"
            " CREATE TRIGGER refuse BEFORE INSERT ON alert_notification FOR EACH ROW EXECUTE FUNCTION refuse()"
        )
    world = World(dsn, config(group_wait="0s"))
    world.set(alert("Hot", "n1"))
    with pytest.raises(psycopg.errors.RaiseException, match="outbox full"):
        world.at(0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM alert_group").fetchone() == (0,), "rolled back with the outbox row"
        conn.execute("DROP TRIGGER refuse ON alert_notification")
    assert world.at(1) == 1, "not lost: the next dispatch queues it"
    assert world.at(2) == 0 and world.outbox() == [("ops", 1, 0, ["n1:firing"])], "and only once"
