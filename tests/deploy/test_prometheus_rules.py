"""The PromQL edition of the default alerts: valid for promtool, firing in promtool's own rule tests,
and the same alerts, severities and durations as the SQL rules the collector evaluates."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from gpuscope.alerts.rules import default_rules_text, parse_rules
from tests.conftest import require_tool

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [require_tool("promtool"), *args], capture_output=True, text=True, timeout=60, check=False, cwd=PROMETHEUS
    )


def test_promtool_checks_the_rules() -> None:
    result = promtool("check", "rules", "gpuscope-rules.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 19 rules found" in result.stdout


def test_promtool_unit_tests_fire_each_alert() -> None:
    result = promtool("test", "rules", "gpuscope-rules.test.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_unit_tests_fire_every_alert_and_evaluate_every_recording_rule() -> None:
    rules = [r for g in yaml.safe_load((PROMETHEUS / "gpuscope-rules.yaml").read_text())["groups"] for r in g["rules"]]
    tests = yaml.safe_load((PROMETHEUS / "gpuscope-rules.test.yaml").read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    quiet = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if not t["exp_alerts"]}
    evaluated = {t["expr"] for case in tests for t in case.get("promql_expr_test", [])}
    alerts = {r["alert"] for r in rules if "alert" in r}
    assert alerts - fired == set(), "alerts no unit test sees fire"
    assert alerts - quiet == set(), "alerts no unit test sees quiet (before their `for`, or on harmless series)"
    assert {r["record"] for r in rules if "record" in r} - evaluated == set(), "recording rules without a test"


def test_the_rules_read_the_native_names_of_today() -> None:
    groups = yaml.safe_load((PROMETHEUS / "gpuscope-rules.yaml").read_text())["groups"]
    for expr in (r["expr"] for g in groups for r in g["rules"]):
        # The bitmask is gone from the native names: one 0/1 gauge per reason instead.
        assert "gpuscope_gpu_clock_event_reasons" not in expr
        # increase() or rate() over a {__name__=~...} selector drops the names, and a GPU's counters collide.
        assert "__name__" not in expr


def test_promql_and_sql_rules_are_the_same_alerts() -> None:
    def seconds(text: str) -> float:
        from gpuscope.alerts.duration import parse_duration

        return parse_duration(text, "for")

    promql = yaml.safe_load((PROMETHEUS / "gpuscope-rules.yaml").read_text())
    prom = {
        (r["alert"], r["labels"]["severity"], seconds(r.get("for", "0s"))) for g in promql["groups"] for r in g["rules"]
    }
    sql = set()
    for group in parse_rules(default_rules_text()):
        for rule in group.rules:
            severity = rule.labels["severity"].render({}, None) if "severity" in rule.labels else None
            sql.add((rule.alert, severity, rule.for_s))
    # The SQL XID rule sets its severity per code in the query; PromQL needs one rule per severity.
    sql.discard(("GpuXidError", None, 0.0))
    sql |= {("GpuXidError", "critical", 0.0), ("GpuXidError", "warning", 0.0)}
    # "Three intervals without data": in SQL the query compares the age with the push interval; in
    # PromQL, up == 0 for 30 s is three failed scrapes at 15 s.
    sql.discard(("ExporterDown", "critical", 0.0))
    sql.add(("ExporterDown", "critical", 30.0))
    # SQL only: a job's share of idle GPUs reads the collector's allocations (docs/reports.md); Prometheus
    # sites have GpuIdleInJob per GPU.
    sql.discard(("JobHoldsIdleGpus", "info", 7200.0))
    # SQL only: racks' budgets are the collector's --rack-budgets (the dashboard's file), not metrics.
    sql.discard(("RackPowerNearBudget", "warning", 300.0))
    assert prom == sql


def test_the_example_notification_file_is_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuscope.alerts.config import load_notify_config

    for name in ("SLACK", "TEAMS", "DISCORD"):
        monkeypatch.setenv(f"GPUSCOPE_{name}_WEBHOOK", f"https://hooks.example/{name.lower()}/secret")
    config = load_notify_config(PROMETHEUS.parent / "alerts" / "notify.yaml")
    critical = config.route.match({"alertname": "GpuLost", "severity": "critical", "cluster": "c"})
    assert [r.receiver for r in critical] == ["oncall-teams", "ops-slack"]
    straggler = config.route.match({"alertname": "JobStraggler", "severity": "warning", "job_id": "42"})
    assert [(r.receiver, r.group_by) for r in straggler] == [("ml-platform-discord", ("alertname", "job_id"))]
    assert [r.receiver for r in config.route.match({"alertname": "GpuOverTemperature"})] == ["ops-slack"]
