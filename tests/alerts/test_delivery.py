"""Delivery from the outbox to real HTTP receivers that play each chat service: payload shapes,
429 with Retry-After, 5xx then success, 4xx kept as failed, and an engine restart in the middle of
delivery with nothing lost and nothing sent twice."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
from collections.abc import Callable
from typing import Any

import httpx
import psycopg
import pytest

from gpuscope.alerts.config import NotifyConfig, parse_notify_config
from gpuscope.alerts.delivery import Delivery
from gpuscope.alerts.dispatch import dispatch
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.part import alerts_part
from gpuscope.alerts.rules import parse_rules
from gpuscope.cli import main
from tests.alerts.instances import alert
from tests.alerts.receiver import ChatReceiver, Reply
from tests.alerts.rules import HOT
from tests.alerts.telemetry import add_node, gpu_sample
from tests.waiting import eventually_async

KINDS = ("slack", "teams", "discord", "mattermost", "googlechat", "webhook", "alertmanager")


def notify_config(receiver: ChatReceiver, **kinds: str) -> NotifyConfig:
    """One receiver per name, of the given kind, at receiver.url/NAME; group_by node, no waiting."""
    return parse_notify_config(
        {
            "route": {"receiver": next(iter(kinds)), "group_by": ["node"], "group_wait": "0s",
                      "routes": [{"matchers": [f"kind={name}"], "receiver": name} for name in kinds]},
            "receivers": [{"name": name, "kind": kind, "url": f"{receiver.url}/{name}", "min_interval": "0s"}
                          for name, kind in kinds.items()],
        }
    )  # fmt: skip


def queue(dsn: str, cfg: NotifyConfig, alerts: list[Any]) -> int:
    async def go() -> int:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await dispatch(conn, {a.fingerprint: a for a in alerts}, cfg, dt.datetime.now(dt.UTC))

    return asyncio.run(go())


def deliver(dsn: str, cfg: NotifyConfig, rounds: int = 1) -> None:
    """`rounds` delivery passes, one straight after the other."""

    async def go() -> None:
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
            httpx.AsyncClient() as client,
        ):
            delivery = Delivery(cfg, client)
            for _ in range(rounds):
                await delivery.run_once(conn)

    asyncio.run(go())


def deliver_until(dsn: str, cfg: NotifyConfig, statuses: dict[str, str], timeout: float = 10.0) -> None:
    """Delivery passes, as the engine runs them, until each receiver's notifications reach their status."""

    async def go() -> None:
        async with (
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn,
            httpx.AsyncClient() as client,
        ):
            delivery = Delivery(cfg, client)

            async def delivered() -> bool:
                await delivery.run_once(conn)
                rows = await asyncio.to_thread(outbox, dsn)
                return bool(rows) and all(status == statuses[receiver] for receiver, status, *_ in rows)

            await eventually_async(delivered, timeout=timeout, interval=0.02, what=f"notifications {statuses}")

    asyncio.run(go())


def outbox(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(
            "SELECT receiver, status, attempts, http_status, last_error FROM alert_notification"
            " ORDER BY notification_id"
        ).fetchall()


def test_each_kind_gets_its_own_payload(dsn: str) -> None:
    with ChatReceiver() as receiver:
        cfg = notify_config(receiver, **{kind: kind for kind in KINDS})
        alerts = [alert("GpuOverTemperature", f"n-{kind}", kind=kind, severity="critical") for kind in KINDS]
        # one big group too: 30 alerts to Discord must fit its 10 embeds
        alerts += [
            alert("GpuOverTemperature", "n-big", kind="discord", gpu=str(g), severity="warning") for g in range(30)
        ]
        assert queue(dsn, cfg, alerts) == len(KINDS) + 1
        deliver(dsn, cfg, rounds=2)
        assert {row[1] for row in outbox(dsn)} == {"sent"}

        (slack,) = receiver.at("/slack")
        assert slack.content_type == "application/json"
        body = slack.body
        assert body["text"].startswith("[FIRING:1] CRITICAL GpuOverTemperature")
        assert body["blocks"][0]["type"] == "header" and len(body["blocks"]) <= 50
        assert body["attachments"][0]["color"] == "#d32f2f"
        assert {"title": "node", "value": "n-slack", "short": True} in body["attachments"][0]["fields"]

        card = receiver.at("/teams")[0].body
        assert card["type"] == "message"
        content = card["attachments"][0]
        assert content["contentType"] == "application/vnd.microsoft.card.adaptive"
        assert content["content"]["type"] == "AdaptiveCard" and content["content"]["version"] == "1.2"
        assert any("GpuOverTemperature on n-teams" in b.get("text", "") for b in content["content"]["body"])

        small, big = sorted((r.body for r in receiver.at("/discord")), key=lambda b: len(b["embeds"]))
        assert small["embeds"][0]["color"] == 0xD32F2F and len(small["content"]) <= 2000
        assert len(big["embeds"]) == 10 and "20 more not shown" in big["content"]
        assert all(len(e["title"]) <= 256 and len(e["fields"]) <= 25 for e in big["embeds"])
        assert small["allowed_mentions"] == {"parse": []}, "alert text never pings @everyone"

        mattermost = receiver.at("/mattermost")[0].body
        assert set(mattermost) == {"text", "attachments"}

        chat = receiver.at("/googlechat")[0].body
        assert set(chat) == {"text"} and len(chat["text"].encode()) <= 32_000

        hook = receiver.at("/webhook")[0].body
        assert set(hook) == {"version", "groupKey", "truncatedAlerts", "status", "receiver", "groupLabels",
                             "commonLabels", "commonAnnotations", "externalURL", "alerts"}  # fmt: skip
        assert hook["version"] == "4" and hook["status"] == "firing" and hook["groupLabels"] == {"node": "n-webhook"}
        (item,) = hook["alerts"]
        assert set(item) == {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
        assert item["endsAt"] == "0001-01-01T00:00:00Z"

        (forwarded,) = receiver.at("/alertmanager/api/v2/alerts")
        (am,) = forwarded.body
        assert set(am) == {"labels", "annotations", "startsAt", "endsAt", "generatorURL"}
        ends = dt.datetime.fromisoformat(am["endsAt"])
        assert ends > dt.datetime.now(dt.UTC) + dt.timedelta(minutes=4), "firing alerts are held a few minutes ahead"


def test_429_waits_as_long_as_retry_after_says(dsn: str) -> None:
    with ChatReceiver() as receiver:
        receiver.script("/slack", Reply(429, {"Retry-After": "1"}, "rate limited"), Reply(200))
        receiver.script(
            "/discord", Reply(429, {}, json.dumps({"retry_after": 0.6, "global": False})), Reply(204, body="")
        )
        cfg = notify_config(receiver, slack="slack", discord="discord")
        queue(dsn, cfg, [alert("Hot", "n1", kind="slack"), alert("Hot", "n2", kind="discord")])
        deliver_until(dsn, cfg, {"slack": "sent", "discord": "sent"})
        first, second = receiver.at("/slack")
        assert second.at - first.at >= 0.95
        first, second = receiver.at("/discord")
        assert 0.55 <= second.at - first.at < 1.2, "Discord's retry_after in the body is honoured"
        assert sorted(r[:4] for r in outbox(dsn)) == [("discord", "sent", 2, 204), ("slack", "sent", 2, 200)]


def test_server_errors_are_retried_with_backoff_and_4xx_fail_for_good(dsn: str) -> None:
    with ChatReceiver() as receiver:
        receiver.script("/flaky", Reply(500, body="oops"), Reply(200))
        receiver.script("/broken", Reply(400, body="invalid_payload"))
        cfg = notify_config(receiver, flaky="mattermost", broken="slack")
        queue(dsn, cfg, [alert("Hot", "n1", kind="flaky"), alert("Hot", "n2", kind="broken")])
        deliver_until(dsn, cfg, {"flaky": "sent", "broken": "failed"})
        assert len(receiver.at("/flaky")) == 2
        assert len(receiver.at("/broken")) == 1, "a rejected payload is not sent again"
        rows = {r[0]: r for r in outbox(dsn)}
        assert rows["flaky"][1:4] == ("sent", 2, 200)
        assert rows["broken"] == ("broken", "failed", 1, 400, "HTTP 400: invalid_payload")


def test_network_errors_are_retried_and_urls_stay_out_of_the_reason(dsn: str) -> None:
    secret = "T000/B000/very-secret-token"
    cfg = parse_notify_config(
        {
            "route": {"receiver": "gone", "group_wait": "0s"},
            "receivers": [{"name": "gone", "kind": "slack", "url": f"http://127.0.0.1:9/services/{secret}"}],
        }
    )
    queue(dsn, cfg, [alert("Hot", "n1")])
    deliver(dsn, cfg)
    ((_, status, attempts, http_status, reason),) = outbox(dsn)
    assert (status, attempts, http_status) == ("pending", 1, None)
    assert "ConnectError" in reason and secret not in reason


def test_a_restart_in_the_middle_of_delivery_loses_nothing_and_repeats_nothing(dsn: str) -> None:
    from gpuscope.alerts import views

    views.apply(dsn)
    for n in range(5):
        (gpu,) = add_node(dsn, f"n{n}", gpus=1)
        gpu_sample(dsn, gpu, temp_c=90)
    with ChatReceiver() as receiver:
        receiver.script("/ops", Reply(200), Reply(500), Reply(200))
        cfg = parse_notify_config(
            {
                "route": {"receiver": "ops", "group_by": ["node"], "group_wait": "0s"},
                "receivers": [{"name": "ops", "kind": "slack", "url": f"{receiver.url}/ops", "min_interval": "500ms"}],
            }
        )

        def failed_once() -> bool:
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT count(*) FROM alert_notification WHERE http_status = 500").fetchone() == (
                    1,
                )

        def all_sent() -> bool:
            with psycopg.connect(dsn) as conn:
                return conn.execute("SELECT count(*) FROM alert_notification WHERE status = 'sent'").fetchone() == (5,)

        async def engine_until(done: Callable[[], bool], timeout: float, what: str) -> None:
            task = asyncio.create_task(
                alerts_part(AlertEngine(parse_rules(HOT), cfg, tick_s=0.1)).leader_tasks[0].run(dsn)
            )
            try:
                await eventually_async(lambda: asyncio.to_thread(done), timeout=timeout, interval=0.02, what=what)
            finally:
                task.cancel()  # as good as a crash for the database: the connections go, open transactions roll back
                await asyncio.gather(task, return_exceptions=True)

        asyncio.run(engine_until(failed_once, 20, "one notification to fail with HTTP 500"))
        sent_before = len(receiver.at("/ops"))
        assert sent_before == 2, "stopped after one delivered and one failed notification"
        asyncio.run(engine_until(all_sent, 30, "all five notifications to be sent"))

    nodes = [r.body["attachments"][0]["fields"][0]["value"] for r in receiver.at("/ops")]
    assert len(nodes) == 6, "five notifications and one retry of the one that got a 500"
    assert sorted(set(nodes)) == [f"n{n}" for n in range(5)]
    retried = nodes[1]
    assert nodes.count(retried) == 2 and all(nodes.count(n) == 1 for n in set(nodes) - {retried})
    with psycopg.connect(dsn) as conn:
        assert conn.execute("SELECT count(*) FROM alert_notification").fetchone() == (5,)


def test_an_engine_stopped_while_posting_marks_what_it_posted(dsn: str) -> None:
    """Stopping the engine (a rolling restart, its dispatch shard moving) while a post is in flight
    lets the post finish and be recorded, so the next dispatcher does not post it again."""
    with ChatReceiver() as receiver:
        receiver.script("/ops", Reply(200, delay_s=0.8))
        cfg = notify_config(receiver, ops="slack")
        assert queue(dsn, cfg, [alert("GpuOverTemperature", "n1")]) == 1

        async def stop_while_posting() -> None:
            task = asyncio.create_task(AlertEngine([], cfg, tick_s=0.05)._deliver(dsn))
            await asyncio.to_thread(receiver.wait_for, "/ops", 1, 10)
            task.cancel()
            results = await asyncio.gather(task, return_exceptions=True)
            assert isinstance(results[0], asyncio.CancelledError)

        asyncio.run(stop_while_posting())
        assert [row[:3] for row in outbox(dsn)] == [("ops", "sent", 1)]
        deliver(dsn, cfg)
        assert len(receiver.at("/ops")) == 1, "nothing posted twice"


def test_test_notify_prints_the_outcome(capsys: pytest.CaptureFixture[str]) -> None:
    with ChatReceiver() as receiver:
        ok = receiver.script("/services/T1/B1/secret-ok", Reply(200))
        bad = receiver.script("/services/T1/B1/secret-bad", Reply(404, body="no_team"))
        assert main(["alerts", "test-notify", "--kind", "slack", "--url", ok]) == 0
        out = capsys.readouterr().out
        assert "HTTP 200" in out and "secret-ok" not in out and "127.0.0.1" in out
        assert main(["alerts", "test-notify", "--kind", "discord", "--url", bad]) == 1
        out = capsys.readouterr().out
        assert "HTTP 404: no_team (failed)" in out and "secret-bad" not in out
        (sample,) = receiver.at("/services/T1/B1/secret-ok")
        assert "GpuOverTemperature" in sample.body["text"]


def test_each_receiver_is_rate_limited(dsn: str) -> None:
    with ChatReceiver() as receiver:
        cfg = parse_notify_config(
            {
                "route": {"receiver": "slow", "group_by": ["node"], "group_wait": "0s"},
                "receivers": [
                    {"name": "slow", "kind": "slack", "url": f"{receiver.url}/slow", "min_interval": "400ms"}
                ],
            }
        )
        queue(dsn, cfg, [alert("Hot", f"n{i}") for i in range(3)])
        deliver_until(dsn, cfg, {"slow": "sent"})
        times = [r.at for r in receiver.at("/slow")]
        assert len(times) == 3
        assert min(b - a for a, b in itertools.pairwise(times)) >= 0.38
