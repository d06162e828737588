"""The usage report's window through a real collector's API and `gpuscope reports` (issue 38, items 5 and 8),
over tests/reports/window_telemetry.py's night with its minute rollups kept back to 21:30 only: the answer is
the window asked to the minute, an edge past the minute rollups is counted as its whole hour and said so (in
the JSON and in the command's output), the command line gives the cost in the site's currency as the Reports
page does, and a grid file without a value is refused."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.conftest import new_database
from tests.processes import running_collector
from tests.reports.window_telemetry import RATES_YAML, at, drop_minutes_before, seed

GPUSCOPE = [sys.executable, "-m", "gpuscope.cli"]
ADMIN = "admin-token-for-tests"


@dataclass(frozen=True)
class Site:
    url: str
    base: datetime  # the night's 20:00
    admin_token: Path


def gpuscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture(scope="module")
def site(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    dsn = new_database(postgres)
    base = seed(dsn)
    drop_minutes_before(dsn, base + at(21, 30))
    folder = tmp_path_factory.mktemp("usage-window")
    config = folder / "reports.yaml"
    config.write_text(RATES_YAML, encoding="utf-8")
    admin = folder / "admin-token"
    admin.write_text(ADMIN + "\n", encoding="utf-8")
    admin.chmod(0o600)
    with running_collector(dsn, admin_token=ADMIN, reports_config=config) as collector:
        yield Site(collector.url, base, admin)


def usage(site: Site, start: datetime, end: datetime, by: str = "user") -> dict[str, Any]:
    params = {"start": start.isoformat(), "end": end.isoformat(), "by": by}
    response = httpx.get(site.url + "/api/v1/reports/usage", params=params, timeout=30)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def moment(text: object) -> datetime:
    return datetime.fromisoformat(str(text))


def test_the_api_answers_the_window_asked_to_the_minute(site: Site) -> None:
    start, end = site.base + at(21, 45), site.base + at(0, 13)
    body = usage(site, start, end.replace(second=40))  # seconds are dropped: the minute rollups' unit
    alice = next(row for row in body["rows"] if row["key"] == "alice")
    # 4 GPUs from 21:45 to 00:13, busy (SM activity 60 %) throughout, at 2 EUR per GPU-hour.
    assert math.isclose(alice["gpu_hours_allocated"], 4 * 148 / 60)
    assert math.isclose(alice["gpu_hours_active"], 4 * 148 / 60 * 0.6)
    assert math.isclose(alice["cost"], 4 * 148 / 60 * 2.0) and body["currency"] == "EUR"
    assert (moment(body["start"]), moment(body["end"])) == (start, end)
    assert body["hours_only"] == []


def test_an_edge_past_the_minute_rollups_is_its_whole_hour_and_the_answer_says_so(site: Site) -> None:
    start, end = site.base + at(21, 13), site.base + at(0, 13)
    body = usage(site, start, end)
    alice = next(row for row in body["rows"] if row["key"] == "alice")
    assert math.isclose(alice["gpu_hours_allocated"], 4 + 8 + 4 * 13 / 60), "21:00-22:00 whole, then to 00:13"
    spans = [(moment(s["start"]), moment(s["end"])) for s in body["hours_only"]]
    assert spans == [(site.base + at(21), site.base + at(22))]
    assert (moment(body["start"]), moment(body["end"])) == (site.base + at(21), end)


def test_the_command_says_the_hours_only_part_and_the_currency(site: Site) -> None:
    days = (datetime.now(UTC) - (site.base + at(21, 15))).total_seconds() / 86400  # from about 21:15
    done = gpuscope("reports", "usage", "--days", f"{days:.6f}", "--collector", site.url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    hour = (site.base + at(21)).strftime("%Y-%m-%dT%H:%M")
    assert lines[1].startswith(f"whole hours only from {hour}"), lines[:3]
    assert "the minute rollups there are past their retention" in lines[1]
    assert lines[2].split()[-2:] == ["cost", "(EUR)"], lines[2]
    jobstats = gpuscope("jobstats", "wide", "--collector", site.url)
    assert jobstats.returncode == 0, jobstats.stderr
    assert "Cost: 40.00 EUR" in jobstats.stdout, "4 GPUs x 5 h at 2 EUR"


@pytest.mark.parametrize("text", ["", "time,g_per_kwh\n", "\n\n"], ids=["empty", "header only", "blank lines"])
def test_grid_load_refuses_a_file_without_a_value(site: Site, tmp_path: Path, text: str) -> None:
    grid = tmp_path / "grid.csv"
    grid.write_text(text, encoding="utf-8")
    done = gpuscope("reports", "grid-load", str(grid), "--collector", site.url, "--token-file", str(site.admin_token))
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert done.stderr.strip() == f"{grid}: no grid intensity values in it: expected lines TIME,G_PER_KWH"
    assert httpx.get(site.url + "/api/v1/reports/grid", timeout=10).json()["points"] == []


def test_the_command_takes_the_uis_range_words(site: Site) -> None:
    """The window the Reports page's URL says (range=FROM..TO), the same on the command line."""
    span = f"{site.base + at(22, 13):%Y-%m-%dT%H:%M}..{site.base + at(24, 13):%Y-%m-%dT%H:%M}"
    done = gpuscope("reports", "usage", "--range", span, "--json", "--collector", site.url)
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert (moment(body["start"]), moment(body["end"])) == (site.base + at(22, 13), site.base + at(24, 13))
    bad = gpuscope("reports", "usage", "--range", "99x", "--collector", site.url)
    assert bad.returncode == 2 and "--range: unknown range '99x'" in bad.stderr
