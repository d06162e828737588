"""Rule files, templates, durations, matchers and notification files: parsing and the errors users see."""

from __future__ import annotations

import time

import pytest

from gpuscope.alerts.config import ConfigError, parse_notify_config
from gpuscope.alerts.duration import parse_duration
from gpuscope.alerts.matchers import parse_matcher
from gpuscope.alerts.rules import RulesError, default_rules_text, parse_rules
from gpuscope.alerts.template import compile_template


def test_the_shipped_rules_parse_and_cover_what_the_issue_asks() -> None:
    groups = parse_rules(default_rules_text())
    names = {r.alert for g in groups for r in g.rules}
    assert {
        "GpuOverTemperature", "GpuXidError", "GpuEccUncorrectable", "GpuRowRemapFailure", "NvlinkErrorsIncreasing",
        "InfinibandLinkDown", "InfinibandErrorsIncreasing", "GpuThermalThrottling", "GpuPowerThrottling", "GpuLost",
        "ExporterDown", "GpuIdleInJob", "JobStraggler",
    } <= names  # fmt: skip
    temp = next(r for g in groups for r in g.rules if r.alert == "GpuOverTemperature")
    assert temp.for_s == 120 and temp.labels["severity"].render({}, None) == "warning"


def test_every_problem_in_a_file_is_reported_with_its_place() -> None:
    text = """
groups:
  - name: a
    interval: 5x
    rules:
      - alert: Good
        expr: SELECT 1 AS value
      - alert: bad name
        expr: SELECT 1 AS value
      - record: something
        expr: SELECT 1
      - alert: NoExpr
      - alert: BadFor
        expr: SELECT 1 AS value
        for: 5
        labels: {alertname: x}
        annotations: {summary: "{{ $labls.node }}"}
        extra: 1
  - name: a
"""
    with pytest.raises(RulesError) as caught:
        parse_rules(text, "r.yaml")
    problems = "\n".join(caught.value.problems)
    for expected in (
        "group 'a': interval: '5x' is not a duration",
        "'alert' must be a name",
        "recording rules are not supported",
        "(NoExpr): 'expr' must be a SQL query",
        "(BadFor): for: a duration needs a unit",
        "'alertname' is set from 'alert'",
        "unknown operand '$labls.node'",
        "unknown keys ['extra']",
        "group 'a': the name is used twice",
    ):
        assert expected in problems
    assert str(caught.value).startswith("r.yaml: ")


@pytest.mark.parametrize("text", ["", "groups: 3", "- a", "groups: [1]\nother: 2", "{{{"])
def test_files_of_the_wrong_shape_are_refused(text: str) -> None:
    with pytest.raises(RulesError):
        parse_rules(text)


def test_templates_render_labels_and_values() -> None:
    labels = {"node": "gpu-07", "gpu": "3"}
    assert compile_template("{{ $labels.node }}/{{ $labels.gpu }}", "t").render(labels, 1.0) == "gpu-07/3"
    assert compile_template('{{ $value | printf "%.1f" }} C', "t").render(labels, 88.26) == "88.3 C"
    assert compile_template('{{ printf "%.0f" $value }}', "t").render(labels, 88.6) == "89"
    assert compile_template("{{ $value | humanize }}", "t").render(labels, 1_500_000.0) == "1.5M"
    assert compile_template("{{ $value | humanizeDuration }}", "t").render(labels, 3725.0) == "1h2m5s"
    assert compile_template("{{ $value }}", "t").render(labels, 3.0) == "3"
    assert compile_template("{{ $labels.missing }}x", "t").render(labels, None) == "x"
    for bad in ("{{ $value | shout }}", "{{ $nope }}", "{{ printf }}", "{{ $value", '{{ $value | printf "%q" }}'):
        with pytest.raises(ValueError):
            compile_template(bad, "t")


def test_durations() -> None:
    assert parse_duration("1h30m", "x") == 5400
    assert parse_duration("250ms", "x") == 0.25
    assert parse_duration("0", "x") == 0
    for bad in ("5", "m5", "1h 5m", "", "-5s", True, None, 5):
        with pytest.raises(ValueError):
            parse_duration(bad, "x")


def test_matchers_follow_alertmanager() -> None:
    labels = {"node": "gpu-07", "severity": "critical"}
    assert parse_matcher("node=gpu-07").matches(labels)
    assert parse_matcher('node="gpu-07"').matches(labels)
    assert parse_matcher("node!=gpu-08").matches(labels)
    assert parse_matcher("node=~gpu-0[0-9]").matches(labels)
    assert not parse_matcher("node=~gpu").matches(labels), "regular expressions are anchored"
    assert parse_matcher("severity!~warn.*").matches(labels)
    assert parse_matcher("rack=").matches(labels), "an absent label matches the empty string"
    for bad in ("node", "=x", "node=~(", "no de=x"):
        with pytest.raises(ValueError):
            parse_matcher(bad)


@pytest.mark.timeout(20)
def test_a_hostile_regex_cannot_stall_matching() -> None:
    """`(a*)*b` backtracks exponentially in Python's re (30 a's take minutes); RE2 answers at once."""
    started = time.perf_counter()
    for pattern in ("(a*)*b", "(a|a)*b", "(a+)+$x", "(.*a){20}b"):
        assert not parse_matcher(f"node=~{pattern}").matches({"node": "a" * 50_000})
    assert time.perf_counter() - started < 2.0


def test_regex_syntax_is_alertmanagers() -> None:
    """Go's regexp (RE2) has no back-references or look-around: Alertmanager refuses them, so do we."""
    for pattern in (r"(a)\1", "(?=a)a", "(?<!b)a"):
        with pytest.raises(ValueError, match="bad regular expression"):
            parse_matcher(f"node=~{pattern}")
    assert parse_matcher(r"node=~gpu-\d{2}").matches({"node": "gpu-07"})
    assert parse_matcher("node=~(?i)GPU-07").matches({"node": "gpu-07"})


def _config(**overrides: object) -> dict[str, object]:
    doc: dict[str, object] = {
        "route": {"receiver": "ops", "routes": [{"matchers": ["severity=critical"], "receiver": "pager"}]},
        "receivers": [
            {"name": "ops", "kind": "slack", "url": "https://hooks.example/services/T/B/secret"},
            {"name": "pager", "kind": "webhook", "url": "http://127.0.0.1:9/"},
        ],
    }
    doc.update(overrides)
    return doc


def test_notification_config_routes_and_inherits() -> None:
    config = parse_notify_config(_config())
    critical = config.route.match({"alertname": "X", "severity": "critical"})
    assert [r.receiver for r in critical] == ["pager"]
    assert critical[0].group_wait_s == 30 and critical[0].repeat_interval_s == 4 * 3600
    assert [r.receiver for r in config.route.match({"alertname": "X"})] == ["ops"]
    assert "secret" not in repr(config.receivers["ops"]), "webhook URLs stay out of reprs and logs"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"receivers": [{"name": "ops", "kind": "pager", "url": "http://x"}]}, "receivers[0].kind: must be one of"),
        ({"receivers": [{"name": "ops", "kind": "slack"}]}, "exactly one of url, url_file, url_env"),
        ({"receivers": [{"name": "ops", "kind": "slack", "url": "ftp://x"}]}, "must start with http"),
        ({"receivers": [{"name": "ops", "kind": "slack", "url_env": "GPUSCOPE_NO_SUCH_VAR"}]}, "is not set"),
        ({"route": {"receiver": "nobody"}}, "receiver 'nobody' is not defined"),
        ({"route": {"receiver": "ops", "group_wait": "soon"}}, "not a duration"),
        ({"route": {"receiver": "ops", "matchers": ["a=b"]}}, "the top route takes every alert"),
        ({"inhibit_rules": [{"source_matchers": ["a=b"]}]}, "needs source_matchers and target_matchers"),
        ({"routes": []}, "routes: unknown key (did you mean route?)"),
    ],
)
def test_notification_config_errors_are_clear(change: dict[str, object], message: str) -> None:
    doc = {**_config(), **change}
    if "receivers" in change:
        doc["route"] = {"receiver": "ops"}  # the default route's receivers may be gone
    with pytest.raises(ConfigError) as caught:
        parse_notify_config(doc)
    assert message in str(caught.value)
