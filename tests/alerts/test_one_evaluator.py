"""Two engines on one database (two collector replicas): one evaluates the (single) rule group and one
notifies; when the one that does both goes, the other takes over within seconds, and the firing alert is
announced once in all."""

from __future__ import annotations

import asyncio
import time

import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.config import parse_notify_config
from gpuscope.alerts.engine import DISPATCH_SHARD, LOCK_KEY, AlertEngine
from gpuscope.alerts.part import alerts_part
from gpuscope.alerts.rules import parse_rules
from gpuscope.core.shards import shard_of
from tests.alerts.receiver import ChatReceiver
from tests.alerts.rules import HOT
from tests.alerts.telemetry import add_node, gpu_sample
from tests.waiting import eventually_async


def test_one_engine_leads_and_another_takes_over(dsn: str) -> None:
    views.apply(dsn)
    (gpu,) = add_node(dsn, "n1", gpus=1)
    gpu_sample(dsn, gpu, temp_c=95)
    with ChatReceiver() as receiver:
        config = parse_notify_config(
            {
                "route": {"receiver": "ops", "group_wait": "0s", "repeat_interval": "1h"},
                "receivers": [{"name": "ops", "kind": "webhook", "url": f"{receiver.url}/hook", "min_interval": "0s"}],
            }
        )

        def evaluated_at() -> float:
            with psycopg.connect(dsn) as conn:
                row = conn.execute("SELECT extract(epoch FROM max(evaluated_at)) FROM alert_rule_status").fetchone()
            return float(row[0]) if row and row[0] is not None else 0.0

        def lock_holders(shard: int) -> int:
            with psycopg.connect(dsn) as conn:
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
                    " AND ((classid::bigint << 32) | objid::bigint) = %s",
                    (LOCK_KEY + 1 + shard,),
                ).fetchone()
            return int(row[0]) if row else 0

        def engine() -> asyncio.Task[None]:
            return asyncio.create_task(
                alerts_part(AlertEngine(parse_rules(HOT), config, tick_s=0.1)).leader_tasks[0].run(dsn)
            )

        async def scenario() -> float:
            first = engine()
            second = None
            try:
                await asyncio.to_thread(receiver.wait_for, "/hook", 1)
                second = engine()
                # Something that must NOT happen: the second engine taking a shard already held, in a
                # window of several of its rebalances (one a second).
                await asyncio.sleep(2.5)
                for shard in (DISPATCH_SHARD, shard_of("g")):
                    assert await asyncio.to_thread(lock_holders, shard) == 1, f"one engine holds shard {shard}"
                first.cancel()  # the leading collector goes away
                await asyncio.gather(first, return_exceptions=True)
                gone = time.time()
                await eventually_async(
                    lambda: asyncio.to_thread(lambda: evaluated_at() >= gone + 0.5),
                    timeout=10,
                    interval=0.1,
                    what="the second engine to evaluate the rules",
                )
                took = time.time() - gone
                await asyncio.sleep(1.5)  # must NOT happen: a window to send anything it (wrongly) thought unsent
                return took
            finally:
                for task in (first, second):
                    if task is not None:
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)

        took = asyncio.run(scenario())
        assert took < 5, f"the second engine took {took:.1f} s to take over"
        assert len(receiver.at("/hook")) == 1, "announced once across both engines"
