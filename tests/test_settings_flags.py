"""Each service's options are made from its settings (gpuscope/core/settings_flags.py): every setting has
an option, its default shown in --help; a setting's value is its option's, else its environment
variable's, else its default; bad values are one line naming the option or the variable."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from gpuscope import cli
from gpuscope.collector_process import CollectorSettings
from gpuscope.core.settings_flags import env_prefix, settings_from, settings_of
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.exporter.node_exporter import ExporterConfig
from gpuscope.exporter_process import ExporterSettings
from tests.commands import GPUSCOPE

SERVICES = {"exporter": ExporterSettings, "collector": CollectorSettings, "dashboard": DashboardSettings}


def command(name: str) -> argparse.ArgumentParser:
    for action in cli._parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            parser = action.choices[name]
            assert isinstance(parser, cli._Parser)
            return parser.with_all_flags()
    raise AssertionError("gpuscope has no subcommands")


def parsed(*argv: str) -> argparse.Namespace:
    return cli._parser().parse_args(list(argv))


@pytest.mark.parametrize("name", SERVICES)
def test_every_setting_has_an_option(name: str) -> None:
    options = {action.dest for action in command(name)._actions}
    missing = [setting.name for setting in settings_of(SERVICES[name]) if setting.name not in options]
    assert not missing, f"gpuscope {name} has no option for {missing}"


def test_the_service_options_people_use_keep_their_names() -> None:
    """The command line of DESIGN.md and the deployment files: a setting's name must not rename its option."""
    expected = {
        "exporter": "--backend --listen --push --interval --push-interval --node --rack --cluster --token-file"
        " --spool-dir --dcgm-compat --amd-compat --compat-only --jobs --pod-resources-socket --pod-metadata"
        " --kubelet-pods-url --slurm-mapping-dir --ib-root --sim-seed --sim-gpus",
        "collector": "--listen --db --db-password-file --data-dir --token-file --node-tokens-file --read-token-file"
        " --retention-days --minute-rollup-days --hour-rollup-days --timescaledb --workers --rules --notify-config"
        " --admin-token-file --no-alerts --rack-budgets --health-policy --no-health --reports-config",
        "dashboard": "--listen --db --db-password-file --data-dir --workers --collector --basic-auth-file"
        " --rack-budgets --reports-config --max-body-bytes --hash-password",
    }
    for name, options in expected.items():
        have = {option for action in command(name)._actions for option in action.option_strings}
        assert set(options.split()) <= have, f"gpuscope {name} lost {set(options.split()) - have}"


def test_an_option_wins_over_the_environment_which_wins_over_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """straggler_interval_s could once be set only in the environment."""
    monkeypatch.delenv("GPUSCOPE_COLLECTOR_STRAGGLER_INTERVAL_S", raising=False)
    assert settings_from(CollectorSettings, parsed("collector")).straggler_interval_s == 5.0
    monkeypatch.setenv("GPUSCOPE_COLLECTOR_STRAGGLER_INTERVAL_S", "7")
    assert settings_from(CollectorSettings, parsed("collector")).straggler_interval_s == 7.0
    given = parsed("collector", "--straggler-interval-s", "9")
    assert settings_from(CollectorSettings, given).straggler_interval_s == 9.0


def test_a_dataclass_service_reads_its_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUSCOPE_DASHBOARD_DB", "postgresql://from-the-environment/x")
    monkeypatch.setenv("GPUSCOPE_DASHBOARD_WORKERS", "3")
    assert settings_from(DashboardSettings, parsed("dashboard")).workers == 3
    settings = settings_from(DashboardSettings, parsed("dashboard", "--workers", "5", "--db", "postgresql://flag/x"))
    assert (settings.workers, settings.db) == (5, "postgresql://flag/x")
    monkeypatch.setenv("GPUSCOPE_DASHBOARD_WORKERS", "0")
    with pytest.raises(ValueError, match=r"^GPUSCOPE_DASHBOARD_WORKERS: must be >= 1, got 0$"):
        settings_from(DashboardSettings, parsed("dashboard"))


def test_switches_and_repeated_options() -> None:
    settings = settings_from(
        CollectorSettings, parsed("collector", "--no-alerts", "--no-stragglers", "--rules", "a.yaml", "--rules", "b")
    )
    assert (settings.alerts, settings.stragglers, settings.health) == (False, False, True)
    assert [str(path) for path in settings.alert_rules] == ["a.yaml", "b"]
    exporter = settings_from(ExporterSettings, parsed("exporter", "--dcgm-compat", "--backend", "sim"))
    assert (exporter.dcgm_compat, exporter.amd_compat, exporter.backend) == (True, False, "sim")


def test_one_default_per_setting() -> None:
    """The exporter's sampling interval was 5 s on the command line and 1 s for an exporter made in code."""
    assert ExporterSettings().interval == ExporterConfig("c", "r", "n").interval == 5.0
    assert ExporterSettings().push_interval == ExporterConfig("c", "r", "n").push_interval


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["collector", "--straggler-interval-s", "0"], "argument --straggler-interval-s: must be > 0, got 0"),
        (["collector", "--alert-tick-s", "soon"], "argument --alert-tick-s: must be a number, got 'soon'"),
        (["collector", "--workers", "300"], "argument --workers: must be <= 256, got 300"),
        (["exporter", "--sim-gpus", "0"], "argument --sim-gpus: must be >= 1, got 0"),
        (["dashboard", "--refresh-ms", "10"], "argument --refresh-ms: must be >= 100, got 10"),
    ],
)
def test_a_value_out_of_bounds_is_one_line(args: list[str], line: str) -> None:
    done = subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == f"gpuscope {args[0]}: error: {line}", done.stderr


def test_settings_made_in_code_are_checked_too() -> None:
    with pytest.raises(ValueError, match=r"^interval: must be > 0, got 0$"):
        ExporterSettings(interval=0)


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("exporter", ["--interval INTERVAL", "(default 5)", "--node NODE", "(default: the host name)"]),
        ("collector", ["--straggler-interval-s", "(default 5)", "--alert-tick-s", "(default 0.5)", "--rules RULES"]),
        ("dashboard", ["--workers WORKERS", "(default 2)", "--refresh-ms", "(default 5000)", "GPUSCOPE_DASHBOARD_"]),
    ],
)
def test_help_lists_the_options_with_their_defaults(name: str, shown: list[str]) -> None:
    done = subprocess.run([*GPUSCOPE, name, "--help"], capture_output=True, text=True, timeout=60, check=True)
    text = " ".join(done.stdout.split())
    for words in shown:
        assert words in text, f"gpuscope {name} --help lacks {words!r}: {done.stdout}"


def test_the_operations_guide_lists_every_setting_read_from_the_environment() -> None:
    guide = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    for cls in (CollectorSettings, DashboardSettings):
        for setting in settings_of(cls):
            row = f"| `{setting.option}` | `{env_prefix(cls)}{setting.name.upper()}` |"
            assert row in guide, f"docs/operations.md lacks the row of {setting.name}: {row}"
