"""`gpuscope alerts check` on a Prometheus rules file (PromQL in expr) names it as such and points at
promtool, instead of printing one SQL syntax error per rule; gpuscope's SQL rules are told apart."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gpuscope.alerts.check import is_promql
from gpuscope.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS_RULES = ROOT / "deploy" / "prometheus" / "gpuscope-rules.yaml"
SQL_RULES = ROOT / "alerts" / "default_rules.yaml"


def exprs(path: Path) -> list[str]:
    return [rule["expr"] for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def test_the_shipped_prometheus_rules_are_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["alerts", "check", str(PROMETHEUS_RULES)]) == 1
    err = capsys.readouterr().err
    assert err == (
        f"{PROMETHEUS_RULES} is a Prometheus rules file (PromQL, e.g. rule GpuOverTemperature): check it with "
        f"`promtool check rules {PROMETHEUS_RULES}`; `gpuscope alerts check` reads gpuscope's own rules, "
        "written in SQL (see docs/alerts.md).\n"
    )


def test_a_recording_rules_file_is_named_by_its_first_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "recording.yaml"
    rules.write_text(
        "groups:\n  - name: r\n    rules:\n"
        "      - record: job:gpu_util:avg\n        expr: avg by (job) (rate(gpu_util_total[5m]))\n"
    )
    assert main(["alerts", "check", str(rules)]) == 1
    assert "is a Prometheus rules file (PromQL, e.g. rule job:gpu_util:avg)" in capsys.readouterr().err


def test_every_shipped_expr_is_told_apart() -> None:
    assert all(is_promql(expr) for expr in exprs(PROMETHEUS_RULES))
    assert not any(is_promql(expr) for expr in exprs(SQL_RULES))


@pytest.mark.parametrize(
    "expr",
    [
        "-- why this rule\nSELECT 1 AS value",
        "/* a note */ WITH x AS (SELECT 1 AS value) SELECT value FROM x",
        "(SELECT node, 1 AS value FROM gpu_latest)",
        "select node, temp_c as value from gpu_latest where temp_c > 90",
        # misspelt SQL keeps its SQL error rather than being called PromQL
        "SELEC node, temp_c AS value FROM gpu_latest",
    ],
)
def test_sql_is_not_promql(expr: str) -> None:
    assert not is_promql(expr)


@pytest.mark.parametrize(
    "expr",
    [
        "up == 0",
        'up{job=~".*exporter.*"} == 0',
        "increase(errors_total[10m]) > 0",
        "max without (instance) (ratio) * 100 > 0",
        "a * on (job, instance) group_left b",
        "avg_over_time(gpu_util[5m]) < 5",
    ],
)
def test_promql_is_recognised(expr: str) -> None:
    assert is_promql(expr)
