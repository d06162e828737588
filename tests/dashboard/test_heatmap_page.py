"""The heatmap page's defaults and its answers to a URL it does not understand, in real headless Chromium
over a real collector: one node whose GPU 1 waits for its peers, busy-spinning at full utilisation with
little SM activity, and whose GPU 2 is throttled to a low SM clock."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from gpuscope.bench.browser import graph_data, open_page, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.dashboard.helpers import dashboard_over_collector
from tests.processes import RunningCollector

PLOT = "document.querySelector('#heatmap-graph .js-plotly-plot')"


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_collector(postgres, _load) as url:
        yield url


def _load(collector: RunningCollector) -> None:
    now = time.time()
    origin = Origin("hm", "rack-1", "hm-01", "nvml", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "NVIDIA H100", f"00:{i:02x}") for i in range(4)]

    def reading(gpu: GpuIdentity) -> GpuReading:
        sm_active = 10.0 if gpu.index == 1 else 80.0
        clock = 900.0 if gpu.index == 2 else 1980.0
        return GpuReading(gpu, True, {"util_pct": 100.0, "sm_active_pct": sm_active, "sm_clock_mhz": clock})

    snapshots = [Snapshot(now + t, tuple(reading(g) for g in gpus), ()) for t in range(-900, 1, 10)]
    push_binary(collector, origin, 0, snapshots)


def _seen(values: list[Any]) -> list[float]:
    return [v for v in values if v is not None and math.isfinite(v)]


def _title(browser: Any) -> str:
    return str(browser.execute_script(f"return {PLOT}.layout.title.text"))


def test_it_opens_on_sm_activity_where_a_waiting_gpu_shows(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/heatmap")
    wait_until(browser, lambda: graph_data(browser, "heatmap-graph"), 20, "the heatmap")
    assert _title(browser).startswith("SM activity")
    (trace,) = graph_data(browser, "heatmap-graph")
    row = trace["y"].index("rack-1/hm-01/gpu1")
    assert max(_seen(trace["z"][row])) <= 10.0, "the waiting GPU stands out"
    assert browser.find_element("id", "heatmap-params").text == "", "nothing to say about a plain URL"


def test_sm_clock_shows_the_throttled_gpu(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/heatmap?metric=sm_clock_mhz&range=15m")
    wait_until(browser, lambda: _title(browser).startswith("SM clock"), 20, "the SM clock heatmap")
    (trace,) = graph_data(browser, "heatmap-graph")
    row = trace["y"].index("rack-1/hm-01/gpu2")
    assert set(_seen(trace["z"][row])) == {900.0}


def test_a_url_it_does_not_understand_is_named_not_swallowed(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/heatmap?metric=bogus&range=99x&level=galaxy")
    text = wait_until(browser, lambda: browser.find_element("id", "heatmap-params").text, 10, "the messages")
    assert "Unknown metric 'bogus'" in text and "SM activity" in text
    assert "unknown range '99x'" in text.lower() and "showing the last 1h" in text
    assert "Unknown level 'galaxy'" in text
    wait_until(browser, lambda: _title(browser).startswith("SM activity"), 20, "the default heatmap")
