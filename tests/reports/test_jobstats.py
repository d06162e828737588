"""`gpuscope jobstats` and `gpuscope reports` against a real collector over the hand-computed data of
tests/collector/test_usage.py (j1: alice, one H100 for 2 h, idle for the last 70 minutes)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.collector.test_usage import J_PER_STEP, _base, _seed
from tests.processes import running_collector

DESIGN_KEYS = {"job", "user", "account", "start", "end", "gpus", "gpu_hours_allocated", "gpu_hours_active",
               "gpu_hours_idle", "energy_kwh", "cost", "co2_kg", "per_gpu"}  # fmt: skip
GPUSCOPE = [sys.executable, "-m", "gpuscope.cli"]


def gpuscope(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUSCOPE, *args], capture_output=True, text=True, timeout=60, check=False)


PER_GPU_KEYS = {"node", "gpu", "util_mean_pct", "tensor_active_mean_pct", "mem_max_bytes", "power_mean_w", "energy_kwh"}


@pytest.fixture
def collector_url(dsn: str, tmp_path: Path) -> str:
    _seed(dsn, _base())
    config = tmp_path / "reports.yaml"
    config.write_text("currency: EUR\nprices:\n  - {model: '*H100*', per_gpu_hour: 2.5}\ngrid_g_per_kwh: 200\n")
    admin = tmp_path / "admin"
    admin.write_text("admin-token-for-tests\n")
    with running_collector(dsn, admin_token="admin-token-for-tests", reports_config=config) as collector:
        yield collector.url


def test_jobstats_json_has_the_contract_keys_and_figures(collector_url: str) -> None:
    done = gpuscope("jobstats", "j1", "--json", "--collector", collector_url)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert set(report) >= DESIGN_KEYS and set(report["per_gpu"][0]) >= PER_GPU_KEYS
    assert (report["job"], report["user"], report["account"], report["gpus"]) == ("j1", "alice", "a1", 1)
    assert math.isclose(report["cost"], 2 * 2.5)
    energy_kwh = (719 * J_PER_STEP - 2000) / 3.6e6
    assert math.isclose(report["energy_kwh"], energy_kwh) and math.isclose(report["co2_kg"], energy_kwh * 0.2)


def test_jobstats_text_names_each_gpu_and_the_waste(collector_url: str) -> None:
    done = gpuscope("jobstats", "j1", "--collector", collector_url)
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "Job j1   User: alice   Account: a1   Partition: p1" in text
    assert "1 of 1 GPUs held idle for up to 1.2 h" in text
    assert "GPU utilisation averaged 42 %" in text
    gpu_line = next(line for line in text.splitlines() if line.strip().startswith("n1"))
    assert gpu_line.split()[1:4] == ["0", "41.7", "20.8"], gpu_line
    missing = gpuscope("jobstats", "nope", "--collector", collector_url)
    assert missing.returncode == 1 and "HTTP 404" in missing.stderr


def test_grid_load_changes_carbon_and_refuses_bad_lines(collector_url: str, tmp_path: Path) -> None:
    base = _base()
    good = tmp_path / "grid.csv"
    good.write_text(f"time,g_per_kwh\n{(base - timedelta(hours=1)).isoformat()},100\n")
    token = tmp_path / "admin"
    loaded = gpuscope("reports", "grid-load", str(good), "--collector", collector_url, "--token-file", str(token))
    assert loaded.returncode == 0 and "loaded 1 grid intensity values" in loaded.stdout, loaded.stderr
    report = json.loads(gpuscope("jobstats", "j1", "--json", "--collector", collector_url).stdout)
    assert math.isclose(report["co2_kg"], report["energy_kwh"] * 0.1), "the loaded series, not the constant"
    bad = tmp_path / "bad.csv"
    bad.write_text("2026-11-20T12:00:00,300\n")
    refused = gpuscope("reports", "grid-load", str(bad), "--collector", collector_url, "--token-file", str(token))
    assert refused.returncode == 2 and "line 1: the time needs a UTC offset" in refused.stderr
    assert gpuscope("reports", "grid-load", str(good), "--collector", collector_url).returncode == 1, "no admin token"


def test_reports_usage_prints_rows_and_totals(collector_url: str) -> None:
    done = gpuscope("reports", "usage", "--by", "account", "--days", "1", "--collector", collector_url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    a1 = next(line for line in lines if line.startswith("a1 "))
    assert a1.split()[1:3] == ["1", "2.0"] and a1.split()[-1] == "5.00"
    assert any(line.startswith("(all)") for line in lines)
