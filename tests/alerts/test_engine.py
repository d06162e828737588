"""Rule evaluation and alert states against a real database: pending -> firing -> resolved, keep_firing_for,
broken and slow rules, the read-only guard, and state kept across an engine restart."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Coroutine
from typing import Any, TypeVar

import psycopg

from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from tests.alerts.telemetry import add_node, event, gpu_sample

T = TypeVar("T")
T0 = dt.datetime(2026, 11, 22, 12, 0, tzinfo=dt.UTC)

HOT_RULES = """
groups:
  - name: g
    interval: 10s
    rules:
      - alert: Hot
        expr: SELECT node, gpu, temp_c AS value FROM gpu_latest WHERE temp_c >= 80
        for: 1m
        keep_firing_for: 30s
        labels: {severity: warning}
        annotations: {summary: "{{ $labels.node }}/{{ $labels.gpu }} at {{ $value }}"}
"""

BROKEN_RULES = """
      - alert: Misspelt
        expr: SELECT node, temperature AS value FROM gpu_latest
      - alert: NoValue
        expr: SELECT node FROM gpu_latest
      - alert: Slow
        expr: SELECT 1 AS value FROM pg_sleep(5)
      - alert: Writes
        expr: WITH gone AS (DELETE FROM public.node RETURNING 1) SELECT count(*) AS value FROM gone
      - alert: Advances
        expr: SELECT nextval('public.node_node_id_seq') AS value
      - alert: TextValue
        expr: SELECT node, 'hot' AS value FROM gpu_latest
      - alert: Twice
        expr: SELECT 1 AS value FROM gpu_latest, generate_series(1, 2)
"""


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _cycle(dsn: str, engine: AlertEngine, at: dt.datetime) -> list[Any]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        return await engine.cycle(conn, at)


async def _load(dsn: str, engine: AlertEngine) -> None:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await engine.load(conn)


def _states(engine: AlertEngine) -> dict[str, str]:
    return {f"{i.labels['node']}/{i.labels['gpu']}": i.state for i in engine.instances.values()}


def test_pending_then_firing_then_kept_then_resolved(adsn: str) -> None:
    gpus = add_node(adsn, "n1", gpus=2)
    gpu_sample(adsn, gpus[0], temp_c=85)
    gpu_sample(adsn, gpus[1], temp_c=60)
    engine = AlertEngine(parse_rules(HOT_RULES), None)
    run(_cycle(adsn, engine, T0))
    assert _states(engine) == {"n1/0": "pending"}
    run(_cycle(adsn, engine, T0 + dt.timedelta(seconds=50)))
    assert _states(engine) == {"n1/0": "pending"}, "not for a whole minute yet"
    run(_cycle(adsn, engine, T0 + dt.timedelta(seconds=60)))
    (alert,) = engine.instances.values()
    assert alert.state == "firing" and alert.fired_at == T0 + dt.timedelta(seconds=60)
    assert alert.labels == {"alertname": "Hot", "node": "n1", "gpu": "0", "severity": "warning"}
    assert alert.annotations == {"summary": "n1/0 at 85"} and alert.value == 85

    gpu_sample(adsn, gpus[0], temp_c=70)  # cooled: the newest sample is below the threshold
    run(_cycle(adsn, engine, T0 + dt.timedelta(seconds=70)))
    assert _states(engine) == {"n1/0": "firing"}, "keep_firing_for holds it for 30 s"
    run(_cycle(adsn, engine, T0 + dt.timedelta(seconds=100)))
    assert _states(engine) == {"n1/0": "resolved"}
    with psycopg.connect(adsn) as conn:
        row = conn.execute("SELECT state, resolved_at FROM alert_instance").fetchone()
    assert row == ("resolved", T0 + dt.timedelta(seconds=100))


def test_a_pending_alert_whose_condition_goes_is_forgotten(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    gpu_sample(adsn, gpu, temp_c=85)
    engine = AlertEngine(parse_rules(HOT_RULES), None)
    run(_cycle(adsn, engine, T0))
    gpu_sample(adsn, gpu, temp_c=50)
    run(_cycle(adsn, engine, T0 + dt.timedelta(seconds=10)))
    assert engine.instances == {}
    with psycopg.connect(adsn) as conn:
        assert conn.execute("SELECT count(*) FROM alert_instance").fetchone() == (0,)


def test_a_restarted_engine_continues_the_for_timer(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    gpu_sample(adsn, gpu, temp_c=85)
    first = AlertEngine(parse_rules(HOT_RULES), None)
    run(_cycle(adsn, first, T0))
    second = AlertEngine(parse_rules(HOT_RULES), None)  # the collector restarted
    run(_load(adsn, second))
    assert _states(second) == {"n1/0": "pending"}
    run(_cycle(adsn, second, T0 + dt.timedelta(seconds=60)))
    assert _states(second) == {"n1/0": "firing"}, "the minute counted from before the restart"


def test_a_broken_rule_is_reported_and_the_others_still_run(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    gpu_sample(adsn, gpu, temp_c=85)
    text = HOT_RULES + BROKEN_RULES
    engine = AlertEngine(parse_rules(text), None, query_timeout_s=0.5)
    results = {r.rule.alert: r for r in run(_cycle(adsn, engine, T0))}
    assert results["Hot"].error is None and len(results["Hot"].samples) == 1
    assert 'column "temperature" does not exist' in (results["Misspelt"].error or "")
    assert "no 'value' column" in (results["NoValue"].error or "")
    assert "statement timeout" in (results["Slow"].error or "")
    assert "data-modifying" in (results["Writes"].error or ""), "one SELECT, nothing else"
    assert "read-only transaction" in (results["Advances"].error or "")
    assert "'value' must be a number" in (results["TextValue"].error or "")
    assert "same labels" in (results["Twice"].error or "")
    with psycopg.connect(adsn) as conn:
        assert conn.execute("SELECT count(*) FROM node").fetchone() == (1,), "nothing was deleted"
        status = dict(conn.execute("SELECT alertname, error IS NULL FROM alert_rule_status").fetchall())
    assert status == {"Hot": True, "Misspelt": False, "NoValue": False, "Slow": False, "Writes": False,
                      "Advances": False, "TextValue": False, "Twice": False}  # fmt: skip


def test_rules_removed_from_the_configuration_resolve_their_alerts(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    gpu_sample(adsn, gpu, temp_c=85)
    engine = AlertEngine(parse_rules(HOT_RULES.replace("for: 1m", "for: 0s")), None)
    run(_cycle(adsn, engine, T0))
    assert _states(engine) == {"n1/0": "firing"}
    other = AlertEngine(parse_rules(HOT_RULES.replace("alert: Hot", "alert: Other")), None)
    run(_load(adsn, other))
    with psycopg.connect(adsn) as conn:
        assert conn.execute("SELECT alertname, state FROM alert_instance").fetchall() == [("Hot", "resolved")]


def test_the_default_rules_find_what_is_wrong(adsn: str) -> None:
    gpus = add_node(adsn, "n1", gpus=4, ports=2)
    add_node(adsn, "n2", gpus=1)
    gpu_sample(adsn, gpus[0], temp_c=90, util_pct=100, clock_event_reasons=0x40, ago_s=1)
    gpu_sample(adsn, gpus[1], temp_c=50, ecc_uncorrected=0, nvlink_crc_errors=5, ago_s=300 - 30)
    gpu_sample(adsn, gpus[1], temp_c=50, ecc_uncorrected=2, nvlink_crc_errors=9, ago_s=1)
    gpu_sample(adsn, gpus[2], up=False, ago_s=1)
    gpu_sample(adsn, gpus[3], temp_c=40, remap_failure=1, ago_s=1)
    event(adsn, gpus[3], "xid", code=79)
    event(adsn, gpus[3], "xid", code=13, count=3)
    with psycopg.connect(adsn) as conn:
        conn.execute(
            "INSERT INTO ib_port_sample (ts, port_id, state, phys_state, symbol_errors)"
            " SELECT now() - interval '100 seconds', port_id, 4, 5, 0 FROM ib_port"
            " UNION ALL SELECT now(), port_id, CASE WHEN device = 'mlx5_0' THEN 1 ELSE 4 END,"
            " CASE WHEN device = 'mlx5_0' THEN 3 ELSE 5 END, CASE WHEN device = 'mlx5_1' THEN 7 ELSE 0 END FROM ib_port"
        )
        conn.execute(
            "INSERT INTO node_seen (node_id, last_seen, push_interval_s) SELECT node_id,"
            " CASE name WHEN 'n2' THEN now() - interval '2 minutes' ELSE now() END, 10 FROM node"
        )
        conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at)"
            " VALUES ('j1', (SELECT node_id FROM node WHERE name = 'n1'), %s, 'thermal', 0.2, now(), now())",
            (gpus[0],),
        )
        # A whole job slowed by another job's traffic: no node, GPU or port of its own.
        conn.execute(
            "INSERT INTO straggler (job_id, node_id, cluster, cause, slowdown, started_at, declared_at, aggressor_job)"
            " VALUES ('j2', NULL, 'test', 'fabric', 0.3, now(), now(), 'j9')"
        )
    engine = AlertEngine(parse_rules(default_rules_text()), None)
    results = run(_cycle(adsn, engine, dt.datetime.now(dt.UTC)))
    assert [r.error for r in results if r.error] == []
    found = {(i.alertname, i.labels.get("node"), i.labels.get("gpu") or i.labels.get("device"), i.state)
             for i in engine.instances.values()}  # fmt: skip
    assert found == {
        ("GpuOverTemperature", "n1", "0", "pending"),
        ("GpuThermalThrottling", "n1", "0", "pending"),
        ("JobStraggler", "n1", "0", "firing"),
        ("JobStraggler", None, None, "firing"),
        ("GpuEccUncorrectable", "n1", "1", "firing"),
        ("NvlinkErrorsIncreasing", "n1", "1", "firing"),
        ("GpuLost", "n1", "2", "firing"),
        ("GpuRowRemapFailure", "n1", "3", "firing"),
        ("GpuXidError", "n1", "3", "firing"),  # twice: codes 79 and 13
        ("InfinibandLinkDown", "n1", "mlx5_0", "pending"),
        ("InfinibandErrorsIncreasing", "n1", "mlx5_1", "firing"),
        ("ExporterDown", "n2", None, "firing"),
    }
    xids = {
        i.labels["xid"]: (i.labels["severity"], i.value)
        for i in engine.instances.values()
        if i.alertname == "GpuXidError"
    }
    assert xids == {"79": ("critical", 1.0), "13": ("warning", 3.0)}
    summaries = sorted(i.annotations["summary"] for i in engine.instances.values() if i.alertname == "JobStraggler")
    assert summaries == [
        "Job j1 is about 20% slower because of n1 GPU 0 (thermal)",
        "Job j2 is about 30% slower because of job j9's traffic (fabric)",
    ]
    ecc = next(i for i in engine.instances.values() if i.alertname == "GpuEccUncorrectable")
    assert ecc.value == 2 and ecc.labels["severity"] == "critical"
