"""The Prometheus scrape configuration shipped for gpuscope is valid for promtool."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import require_tool

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def test_promtool_checks_the_scrape_config() -> None:
    result = subprocess.run(
        [require_tool("promtool"), "check", "config", "prometheus.yml"],
        capture_output=True, text=True, timeout=60, check=False, cwd=PROMETHEUS,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout and "14 rules found" in result.stdout, "the rules load with it"
