"""Alertmanager's notification semantics over the real tables: group_wait, group_interval,
repeat_interval, send_resolved, grouping, routing, inhibition and silences; nothing queued twice
when the engine restarts."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import psycopg

from gpuscope.alerts import silences
from gpuscope.alerts.config import NotifyConfig, parse_notify_config
from gpuscope.alerts.dispatch import dispatch
from gpuscope.alerts.evaluate import fingerprint
from gpuscope.alerts.matchers import parse_matcher
from gpuscope.alerts.state import Instance

T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)


def config(**route: Any) -> NotifyConfig:
    doc: dict[str, Any] = {
        "route": {"receiver": "ops", "group_by": ["alertname"], "group_wait": "30s", "group_interval": "5m",
                  "repeat_interval": "4h", **route},
        "receivers": [
            {"name": "ops", "kind": "slack", "url": "http://127.0.0.1:9/ops"},
            {"name": "quiet", "kind": "webhook", "url": "http://127.0.0.1:9/quiet", "send_resolved": False},
            {"name": "pager", "kind": "webhook", "url": "http://127.0.0.1:9/pager"},
        ],
        "inhibit_rules": [{"source_matchers": ["alertname=ExporterDown"],
                           "target_matchers": ["alertname!=ExporterDown"], "equal": ["node"]}],
    }  # fmt: skip
    return parse_notify_config(doc)


def alert(name: str, node: str, state: str = "firing", at: dt.datetime = T0, **labels: str) -> Instance:
    all_labels = {"alertname": name, "node": node, **labels}
    return Instance(
        fingerprint(all_labels), name, "g", all_labels, {"summary": f"{name} on {node}"}, 1.0, state, at,
        at if state != "pending" else None, at, at if state == "resolved" else None, at,
    )  # fmt: skip


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


def test_without_send_resolved_nothing_is_said_when_alerts_resolve(dsn: str) -> None:
    world = World(dsn, config(receiver="quiet", group_wait="0s"))
    world.set(alert("Hot", "n1"), alert("Hot", "n2"))
    world.at(0)
    world.set(alert("Hot", "n1", state="resolved"))
    assert world.at(300) == 0
    world.set(alert("Hot", "n2", state="resolved"))
    assert world.at(600) == 0
    assert [row[0] for row in world.outbox()] == ["quiet"]


def test_group_by_splits_and_routes_with_continue(dsn: str) -> None:
    cfg = config(
        group_by=["alertname", "node"],
        group_wait="0s",
        # continue: the alert goes on to the next sibling, here a catch-all (else only the first match takes it)
        routes=[{"matchers": ["severity=critical"], "receiver": "pager", "continue": True}, {"receiver": "ops"}],
    )
    world = World(dsn, cfg)
    world.set(alert("Hot", "n1"), alert("Hot", "n2"), alert("Lost", "n1", severity="critical"))
    assert world.at(0) == 4
    assert sorted(world.outbox()) == [
        ("ops", 1, 0, ["n1:firing"]),
        ("ops", 1, 0, ["n1:firing"]),
        ("ops", 1, 0, ["n2:firing"]),
        ("pager", 1, 0, ["n1:firing"]),
    ]


def test_a_down_node_inhibits_its_gpu_alerts(dsn: str) -> None:
    world = World(dsn, config(group_wait="0s", group_by=["..."]))
    world.set(alert("ExporterDown", "n1"), alert("Hot", "n1"), alert("Hot", "n2"))
    assert world.at(0) == 2
    assert sorted(world.outbox()) == [("ops", 1, 0, ["n1:firing"]), ("ops", 1, 0, ["n2:firing"])]
    with psycopg.connect(dsn) as conn:
        keys = [r[0] for r in conn.execute("SELECT group_key FROM alert_group ORDER BY 1")]
    assert not any('"Hot"' in k and '"n1"' in k for k in keys), "Hot on n1 was inhibited"


def test_silences_mute_until_they_expire(dsn: str) -> None:

    async def silence() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            s = await silences.create(
                conn, [parse_matcher("node=n1")], dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), "test", "maintenance"
            )
            return s.silence_id

    async def expire(silence_id: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            assert await silences.expire(conn, silence_id) is not None

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
