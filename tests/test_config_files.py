"""The operator's configuration files (health policy, reports with its digest, notifications): each problem
is reported as FILE:LINE: KEY: what is wrong, and the shipped examples load."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuscope.alerts.config import ConfigError, load_notify_config
from gpuscope.health.policy import HealthPolicy, PolicyError, load_policy
from gpuscope.reports.config import ReportsConfigError, load_reports_config
from gpuscope.reports.digest.settings import digest_settings_from

ROOT = Path(__file__).resolve().parents[1]

NOTIFY = """\
route:
  receiver: ops
  group_wait: 30s
  routes:
    - matchers: ['severity="critical"']
      receiver: ops
receivers:
  - name: ops
    kind: slack
    url: https://hooks.example/services/T/B/secret
inhibit_rules:
  - source_matchers: ['alertname="ExporterDown"']
    target_matchers: ['alertname!="ExporterDown"']
    equal: [cluster, node]
"""

DIGEST = """\
currency: EUR
digest:
  weekday: friday
  hour_utc: 8
  email:
    smtp_host: smtp.example.org
    from: gpuscope@example.org
    domain: example.org
    min_idle_share: 0.5
"""

Loader = Callable[[Path], Any]
# Each file: how it is loaded, the error it raises, and a valid text to break line by line.
FILES: dict[str, tuple[Loader, type[ValueError], str]] = {
    "policy": (load_policy, PolicyError, "scheduler: slurm\ndry_run: true\nmax_drained: 2\nmax_drained_share: 0.5\n"),
    "reports": (load_reports_config, ReportsConfigError, "currency: EUR\nprices:\n  - {model: A1, per_gpu_hour: 2}\n"),
    "digest": (load_reports_config, ReportsConfigError, DIGEST),
    "notify": (load_notify_config, ConfigError, NOTIFY),
}

# (file, the line to change (1-based), its new text, the message expected on that line)
PROBLEMS = [
    ("policy", 2, "drynrun: true", "drynrun: unknown key (did you mean dry_run?)"),
    ("policy", 3, "max_drained: four", "max_drained: expected a whole number, got 'four'"),
    ("policy", 4, "max_drained_share: 1.5", "max_drained_share: must be <= 1, got 1.5"),
    ("policy", 1, "scheduler: lsf", "scheduler: must be one of 'none', 'slurm' or 'kubernetes', got 'lsf'"),
    ("reports", 1, "currncy: EUR", "currncy: unknown key (did you mean currency?)"),
    ("reports", 3, "  - {model: A1, per_gpu_hour: cheap}", "prices[0].per_gpu_hour: expected a number, got 'cheap'"),
    ("reports", 3, "  - {model: A1, per_gpu_hour: -1}", "prices[0].per_gpu_hour: must be >= 0, got -1"),
    ("digest", 3, "  frequency: weekly", "digest.frequency: unknown key; known: weekday, hour_utc,"),
    ("digest", 9, "    min_idle_share: lots", "digest.email.min_idle_share: expected a number, got 'lots'"),
    ("digest", 4, "  hour_utc: 24", "digest.hour_utc: must be <= 23, got 24"),
    ("digest", 8, "    domian: example.org", "digest.email.domian: unknown key (did you mean domain?)"),
    ("notify", 3, "  group_wiat: 30s", "route.group_wiat: unknown key (did you mean group_wait?)"),
    ("notify", 9, "    kind: pager", "receivers[0].kind: must be one of slack,"),
    ("notify", 3, "  group_wait: [30s]", "route.group_wait: expected a duration"),
    ("notify", 6, "      receiver: nobody", "route.routes[0].receiver: receiver 'nobody' is not defined"),
]


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def _with_line(text: str, number: int, new: str) -> str:
    lines = text.splitlines()
    lines[number - 1] = new
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("name", FILES)
def test_the_valid_text_loads(tmp_path: Path, name: str) -> None:
    load, _, text = FILES[name]
    load(_write(tmp_path, name, text))


@pytest.mark.parametrize(("name", "line", "new", "message"), PROBLEMS)
def test_a_problem_is_named_with_its_file_line_and_key(
    tmp_path: Path, name: str, line: int, new: str, message: str
) -> None:
    load, error, text = FILES[name]
    path = _write(tmp_path, name, _with_line(text, line, new))
    with pytest.raises(error) as caught:
        load(path)
    assert str(caught.value).startswith(f"{path}:{line}: {message}"), str(caught.value)


def test_every_problem_gets_its_own_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "policy", "dry_run: maybe\nmax_drained: -1\nevery_s: .inf\n")
    with pytest.raises(PolicyError) as caught:
        load_policy(path)
    assert str(caught.value).splitlines() == [
        f"{path}:1: dry_run: expected true or false, got 'maybe'",
        f"{path}:2: max_drained: must be >= 0, got -1",
        f"{path}:3: every_s: must be a finite number, got inf",
    ]


@pytest.mark.parametrize("name", FILES)
def test_broken_yaml_is_refused_with_its_line(tmp_path: Path, name: str) -> None:
    load, error, text = FILES[name]
    path = _write(tmp_path, name, text + "broken: [unclosed\nnext: 1\n")
    with pytest.raises(error, match=rf"^{re.escape(str(path))}:\d+: not valid YAML: "):
        load(path)


@pytest.mark.parametrize("name", FILES)
def test_a_list_where_a_mapping_belongs_is_refused(tmp_path: Path, name: str) -> None:
    load, error, _ = FILES[name]
    path = _write(tmp_path, name, "- scheduler: slurm\n")
    with pytest.raises(error) as caught:
        load(path)
    assert str(caught.value) == f"{path}: top level: expected a mapping, got a list"


@pytest.mark.parametrize("name", FILES)
def test_a_missing_file_is_named(tmp_path: Path, name: str) -> None:
    load, error, _ = FILES[name]
    with pytest.raises(error) as caught:
        load(tmp_path / "absent.yaml")
    assert str(caught.value) == f"{tmp_path / 'absent.yaml'}: cannot read: No such file or directory"


def test_an_empty_file_means_the_defaults_where_every_key_has_one(tmp_path: Path) -> None:
    """As before: an empty policy is the safe default (dry run, no scheduler), empty reports have no prices;
    `digest:` left empty is no digest. The notification file has no default route, so it is refused."""
    assert load_policy(_write(tmp_path, "policy", "# nothing yet\n")) == HealthPolicy()
    reports = load_reports_config(_write(tmp_path, "reports", ""))
    assert (reports.rates.currency, reports.rates.prices, reports.digest) == (None, (), None)
    assert load_reports_config(_write(tmp_path, "digest", "digest:\n")).digest is None
    assert digest_settings_from({}).weekday == 0
    path = _write(tmp_path, "notify", "\n# to do\n")
    with pytest.raises(ConfigError) as caught:
        load_notify_config(path)
    assert str(caught.value) == f"{path}: the file is empty: expected a mapping of keys to values"


def test_a_missing_key_is_named_at_its_mapping(tmp_path: Path) -> None:
    path = _write(tmp_path, "notify", "receivers: []\nexternal_url: https://x\n")
    with pytest.raises(ConfigError) as caught:
        load_notify_config(path)
    assert str(caught.value) == f"{path}: route: required key missing"
    path = _write(tmp_path, "notify", NOTIFY.replace("    kind: slack\n", ""))
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}:8: receivers\[0\]\.kind: required key missing"):
        load_notify_config(path)


def test_values_are_not_quietly_converted(tmp_path: Path) -> None:
    """A quoted "4" is not 4, nor "false" false: a typing mistake the site should hear about."""
    for text, named in (('max_drained: "4"', "max_drained"), ('dry_run: "no"', "dry_run"), ("max_drained: on", "max_")):
        with pytest.raises(PolicyError, match=named):
            load_policy(_write(tmp_path, "policy", text))
    assert load_policy(_write(tmp_path, "policy", "max_drained: 4.0\nquiet_s: 60\n")).max_drained == 4, "as always"
    assert load_policy(_write(tmp_path, "policy", "protect_jobs: '^hero-'\n")).protect_jobs == ("^hero-",)


def _yaml_blocks(markdown: Path) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", markdown.read_text(), flags=re.S)


def test_the_shipped_examples_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLACK", "TEAMS", "DISCORD"):
        monkeypatch.setenv(f"GPUSCOPE_{name}_WEBHOOK", f"https://hooks.example/{name.lower()}/secret")
    assert len(load_notify_config(ROOT / "deploy" / "alerts" / "notify.yaml").receivers) == 3
    policy, ladder = _yaml_blocks(ROOT / "docs" / "health.md")
    assert load_policy(_write(tmp_path, "policy", policy)).scheduler == "slurm"
    assert load_policy(_write(tmp_path, "ladder", ladder)).repair_commands["reboot_node"][1] == "{node}"
    prices, digest = _yaml_blocks(ROOT / "docs" / "reports.md")
    prices = prices.replace("digest: {...}", "")  # a placeholder for the block below
    assert load_reports_config(_write(tmp_path, "reports", prices)).rates.currency == "EUR"
    config = load_reports_config(_write(tmp_path, "digest", digest))
    (tmp_path / "slack-usage-url").write_text("https://hooks.slack.com/services/T/B/x\n")
    (tmp_path / "smtp-password").write_text("secret\n")
    settings = digest_settings_from(config.digest, base=tmp_path)
    assert settings.email is not None and settings.email.username == "gpuscope"
