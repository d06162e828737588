"""Rules' `for` clocks start when the stored telemetry shows the condition began (the query's `since`
column), not when the engine first saw it: a collector started beside a job idle for an hour fires
GpuIdleInJob at once, a restarted engine does not wait the whole `for` again, and a job the data shows
idle for over two hours fires JobHoldsIdleGpus instead of staying pending. Against a real PostgreSQL,
with the collector's own minute rollups."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from gpuscope.alerts.check import check_sql
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.alerts.state import Instance
from gpuscope.collector.query.rack_power import NEAR_BUDGET
from gpuscope.collector_process import CollectorSettings, alert_engine
from tests.alerts.telemetry import add_node, allocate, cycle, history

SINCE_RULES = """
groups:
  - name: g
    interval: 30s
    rules:
      - alert: Hot
        expr: |
          SELECT node, gpu, temp_c AS value, now() - make_interval(mins => 20) AS since
          FROM gpu_latest WHERE temp_c >= 80
        for: 15m
"""


def load(dsn: str, engine: AlertEngine) -> None:
    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await engine.load(conn)

    asyncio.run(run())


def shipped(*names: str, **engine_options: Any) -> AlertEngine:
    """An engine with only these of the shipped rules."""
    groups = [
        dataclasses.replace(g, rules=tuple(r for r in g.rules if r.alert in names))
        for g in parse_rules(default_rules_text())
    ]
    return AlertEngine([g for g in groups if g.rules], None, **engine_options)


def by_gpu(engine: AlertEngine, name: str, job: str) -> dict[str, Instance]:
    return {i.labels["gpu"]: i for i in engine.instances.values() if i.alertname == name and i.labels["job_id"] == job}


def minutes_ago(t: dt.datetime) -> float:
    return (dt.datetime.now(dt.UTC) - t).total_seconds() / 60


def test_a_rule_that_says_since_when_fires_when_the_data_says_it_held_long_enough(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    history(adsn, [gpu], 1, temp_c=85.0)
    engine = AlertEngine(parse_rules(SINCE_RULES), None)
    cycle(adsn, engine, dt.datetime.now(dt.UTC))
    (hot,) = engine.instances.values()
    assert hot.state == "firing", "held 20 minutes by the data: the 15 are over at the first evaluation"
    assert 19.9 < minutes_ago(hot.active_at) < 20.1


def test_a_restarted_engine_takes_the_clock_from_the_data(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    history(adsn, [gpu], 1, temp_c=85.0)
    now = dt.datetime.now(dt.UTC)
    with psycopg.connect(adsn) as conn:  # what an engine stopped 1 minute ago left: pending since then
        conn.execute(
            "INSERT INTO alert_instance (fingerprint, alertname, rule_group, labels, annotations, value, state,"
            " active_at, last_true_at, evaluated_at) VALUES ('f', 'Hot', 'g', %s, '{}', 85, 'pending', %s, %s, %s)",
            (psycopg.types.json.Jsonb({"alertname": "Hot", "node": "n1", "gpu": "0"}), now, now, now),
        )
    engine = AlertEngine(parse_rules(SINCE_RULES), None)
    load(adsn, engine)
    cycle(adsn, engine, now + dt.timedelta(seconds=30))
    assert [i.state for i in engine.instances.values()] == ["firing"]


def test_an_idle_job_found_by_a_new_collector_fires_at_its_first_evaluation(adsn: str) -> None:
    """The demo's story: a notebook holding 8 GPUs, idle for 70 minutes when the collector starts (GPU 0
    was busy until 10 minutes ago); and a job idle for two and a half hours, which wastes enough to fire
    JobHoldsIdleGpus."""
    gpus = add_node(adsn, "n1", gpus=8)
    history(adsn, gpus, 70, util_pct=lambda ago, gpu: 90.0 if gpu == gpus[0] and ago > 10 else 0.0)
    allocate(adsn, "notebook", gpus, started_min_ago=70)
    long_idle = add_node(adsn, "n2", gpus=2)
    history(adsn, long_idle, 150)
    allocate(adsn, "forgotten", long_idle, started_min_ago=150)
    engine = shipped("GpuIdleInJob", "JobHoldsIdleGpus")
    cycle(adsn, engine, dt.datetime.now(dt.UTC))

    idle = by_gpu(engine, "GpuIdleInJob", "notebook")
    assert {gpu: a.state for gpu, a in idle.items()} == {"0": "pending"} | {str(g): "firing" for g in range(1, 8)}
    assert 69.5 < minutes_ago(idle["3"].active_at) < 70.5, "idle since the job began, as the data shows"
    assert 8 < minutes_ago(idle["0"].active_at) < 11, "GPU 0 idle since its last busy minute"
    jobs = {a.labels["job_id"]: a for a in engine.instances.values() if a.alertname == "JobHoldsIdleGpus"}
    assert (jobs["notebook"].state, jobs["notebook"].value) == ("pending", 8.0), "idle for 70 minutes of 2 hours"
    assert 69.5 < minutes_ago(jobs["notebook"].active_at) < 70.5
    assert jobs["forgotten"].state == "firing", "the data shows it idle for 2.5 hours: no more waiting"
    assert jobs["forgotten"].annotations["summary"] == "Job forgotten (hiro) holds 2 of its 2 GPUs idle"


@pytest.mark.parametrize("budgeted", [True, False])
def test_a_rack_near_its_budget_warns_at_the_overviews_threshold(adsn: str, budgeted: bool) -> None:
    """Racks of 4 GPUs with 700 W power limits; a budget of 2 kW for the near one where the site sets one,
    else the power limits (2.8 kW). Near for 10 minutes already: it fires at the first evaluation."""
    budget_w = 2000.0 if budgeted else 2800.0
    near, far = add_node(adsn, "n1", gpus=4, rack="r1"), add_node(adsn, "n2", gpus=4, rack="r2")
    history(adsn, near, 10, power_w=budget_w * (NEAR_BUDGET + 0.01) / 4, power_limit_w=700.0)
    history(adsn, far, 10, power_w=2800.0 * (NEAR_BUDGET - 0.01) / 4, power_limit_w=700.0)
    budgets = {"test/r1": 2.0} if budgeted else {"r9": 1.0}
    engine = shipped("RackPowerNearBudget", rack_budgets_kw=budgets)
    cycle(adsn, engine, dt.datetime.now(dt.UTC))
    (alert,) = engine.instances.values()
    assert (alert.labels["rack"], alert.state, alert.labels["severity"]) == ("r1", "firing", "warning")
    assert alert.value == pytest.approx(100 * (NEAR_BUDGET + 0.01))
    assert alert.annotations["summary"] == f"Rack r1 draws {100 * (NEAR_BUDGET + 0.01):.0f}% of its power budget"


def test_a_since_that_is_no_timestamptz_is_one_clear_line(adsn: str) -> None:
    (gpu,) = add_node(adsn, "n1", gpus=1)
    history(adsn, [gpu], 1, temp_c=85.0)
    groups = parse_rules(SINCE_RULES.replace("now() - make_interval(mins => 20) AS since", "localtimestamp AS since"))
    assert check_sql(adsn, groups) == [
        "group 'g' rule Hot: 'since' must be a timestamptz (since when the condition holds)"
    ]

    async def run() -> list[Any]:
        async with await psycopg.AsyncConnection.connect(adsn, autocommit=True) as conn:
            return await AlertEngine(groups, None).cycle(conn, dt.datetime.now(dt.UTC))

    (result,) = asyncio.run(run())
    assert result.error is not None and result.error.startswith("'since' must be a timestamptz, got datetime")


def test_the_collector_holds_racks_to_the_dashboards_budget_file(tmp_path: Path) -> None:
    budgets = tmp_path / "rack-budgets.yaml"
    budgets.write_text("prod/rack-1: 40\nrack-2: 12.5\n")
    settings = CollectorSettings(data_dir=tmp_path, rack_budgets=budgets)
    engine = alert_engine(settings)
    assert engine is not None
    assert json.loads(engine.rack_facts["gpuscope.rack_budgets_kw"]) == {"prod/rack-1": 40.0, "rack-2": 12.5}
    assert float(engine.rack_facts["gpuscope.rack_near_budget"]) == NEAR_BUDGET
    budgets.write_text("rack-1: -3\n")
    with pytest.raises(ValueError, match="rack-1: the budget must be a positive number of kW"):
        alert_engine(settings)
