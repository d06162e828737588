"""Alert engines sharded by rule group (alerts/engine.py, core/shards.py): with two engines on one
database each group is evaluated by exactly one of them, every alert is announced once; when one engine
goes, the other evaluates every group, picks up the pending alerts' clocks from the database, and
announces nothing twice."""

from __future__ import annotations

import asyncio
import time

import psycopg
import yaml

from gpuscope.alerts import views
from gpuscope.alerts.config import parse_notify_config
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.part import alerts_part
from gpuscope.alerts.rules import parse_rules
from gpuscope.core.shards import shard_of
from tests.alerts.receiver import ChatReceiver
from tests.alerts.telemetry import add_node, gpu_sample
from tests.waiting import eventually_async

# Groups whose shards differ, so two engines split them (checked below, not assumed).
GROUPS = ["g0", "g1", "g2", "g3", "g4", "g5"]
HOT_SQL = "SELECT node, gpu, temp_c AS value FROM gpu_latest WHERE temp_c >= 85"
RULES = yaml.safe_dump(
    {"groups": [{"name": g, "interval": "1s", "rules": [{"alert": f"Hot{g}", "expr": HOT_SQL}]} for g in GROUPS]}
)


def test_two_engines_split_the_groups_and_one_takes_all_when_the_other_goes(dsn: str) -> None:
    assert len({shard_of(g) for g in GROUPS}) > 1
    views.apply(dsn)
    (gpu,) = add_node(dsn, "n1", gpus=1)
    gpu_sample(dsn, gpu, temp_c=95)
    with ChatReceiver() as receiver:
        config = parse_notify_config(
            {
                "route": {"receiver": "ops", "group_by": ["alertname"], "group_wait": "0s", "repeat_interval": "1h"},
                "receivers": [{"name": "ops", "kind": "webhook", "url": f"{receiver.url}/hook", "min_interval": "0s"}],
            }
        )
        engines = [AlertEngine(parse_rules(RULES), config, tick_s=0.1) for _ in range(2)]

        async def scenario() -> tuple[list[set[str]], set[str]]:
            tasks = [asyncio.create_task(alerts_part(engine).leader_tasks[0].run(dsn)) for engine in engines]
            try:
                await asyncio.to_thread(receiver.wait_for, "/hook", len(GROUPS), 20)
                await eventually_async(
                    lambda: all(e.instances for e in engines), what="both engines evaluating", timeout=10
                )
                split = [{i.rule_group for i in e.instances.values()} for e in engines]
                tasks[0].cancel()  # one collector goes
                await asyncio.gather(tasks[0], return_exceptions=True)
                gone = time.time()
                await eventually_async(
                    lambda: asyncio.to_thread(_all_evaluated_since, dsn, gone + 0.5),
                    what="the survivor evaluating every group",
                    timeout=10,
                    interval=0.1,
                )
                await asyncio.sleep(1.5)  # a window for a repeated announcement that must not come
                return split, {i.rule_group for i in engines[1].instances.values()}
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

        split, survivor = asyncio.run(scenario())
    assert split[0] and split[1] and not split[0] & split[1], split
    assert split[0] | split[1] == set(GROUPS)
    assert survivor == set(GROUPS)
    announced = [hook.body["groupLabels"]["alertname"] for hook in receiver.at("/hook")]
    assert sorted(announced) == sorted(f"Hot{g}" for g in GROUPS), "each alert announced once in all"


def _all_evaluated_since(dsn: str, since: float) -> bool:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT rule_group, extract(epoch FROM max(evaluated_at)) FROM alert_rule_status GROUP BY 1"
        ).fetchall()
    return {group for group, at in rows if at is not None and float(at) >= since} == set(GROUPS)
