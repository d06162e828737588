"""The node page tells an operator what is wrong on a node and since when, in real headless Chromium over a
real collector: a simulated H100 node's 40 minutes, with faults staged on top of the simulator's readings
(an uncorrectable ECC error whose row remap waits for a reset, an NVLink error, application XIDs, an
InfiniBand port that flapped twice), and a quiet PCIe node without NVLink or InfiniBand; and the busy
little cluster (busy_cluster.py), whose hot GPU slows down and is its job's straggler. The panels' pure
parts (state words, XID actions, findings) are tested directly too."""

from __future__ import annotations

import dataclasses
import re
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest

from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.bench.browser import console_errors, graph_data, open_page, screenshot
from gpuscope.collector import query
from gpuscope.collector.query.counters import CounterUse, StateUse, Summary
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.pools import open_read_pool
from gpuscope.dashboard.node_data import (
    CHECK_POWER,
    COOL,
    OVER_TEMPERATURE_C,
    NodeHealth,
    findings,
    load_node_health,
    state_words,
    xid,
)
from gpuscope.dashboard.node_panels import indices
from gpuscope.dashboard.pages.node import health_due
from gpuscope.exporter.events import XID, Event
from gpuscope.exporter.sim import JobSchedule, SimJobs, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, PortReading, Snapshot
from gpuscope.exporter.wire import Origin
from gpuscope.stragglers.reads import StragglerRow
from tests.collector.helpers import push_binary
from tests.conftest import new_database
from tests.dashboard import busy_cluster
from tests.dashboard.helpers import dashboard_over_collector
from tests.processes import RunningCollector, running_collector

NODE, QUIET = "node-000", "pcie-01"
HISTORY_S, STEP_S = 2400, 10
ECC_AT, NVLINK_AT, APP_AT = -1500, -480, -1980  # seconds from now: GPU 3's ECC error, GPU 5's NVLink error
FLAPS = ((-1200, 3), (-360, 2))  # mlx5_2 goes down at these times for this many samples
# busy_cluster's GPU heats up 1500 s into a history that ends ~20 s before loading ends: ~15 min ago, and
# a little more by the time a page shows it.
HOT_SINCE_MIN = range(15, 18)


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_collector(postgres, _load) as url:
        yield url


@pytest.fixture(scope="module")
def busy(postgres: EmbeddedPostgres) -> Iterator[str]:
    def load(collector: RunningCollector) -> None:
        busy_cluster.load(collector)

    with dashboard_over_collector(postgres, load) as url:
        yield url


def _load(collector: RunningCollector) -> None:
    now = time.time()
    _push_faulty_node(collector, now)
    _push_quiet_node(collector, now)


def _push_faulty_node(collector: RunningCollector, now: float) -> None:
    (spec,) = build_topology(1, 8, 1, 4, cluster="prod")
    seed, schedule = _schedule_with_a_long_job(spec, now)
    source, jobs = SimNodeSource(spec, schedule, seed), SimJobs(spec, schedule)
    origin = Origin(spec.cluster, spec.rack, spec.name, "sim", str(uuid.uuid4()))
    snapshots, events = [], []
    for k in range(HISTORY_S // STEP_S):
        t = k * STEP_S - HISTORY_S  # seconds from now
        gpus, ports = source.read(now + t)
        snapshots.append(
            Snapshot(now + t, tuple(_gpu_faults(r, t) for r in gpus), tuple(_port_faults(r, t) for r in ports),
                     jobs=jobs.assign(source.gpus, now + t))
        )  # fmt: skip
        for at, gpu, codes in ((APP_AT, 1, (13, 43)), (ECC_AT, 3, (48, 63, 94)), (NVLINK_AT, 5, (74,))):
            if at <= t < at + STEP_S:
                events += [Event(now + t, gpu, XID, code=code) for code in codes]
    for seq, first in enumerate(range(0, len(snapshots), 30)):
        batch = snapshots[first : first + 30]
        push_binary(collector, origin, seq, batch, [e for e in events if batch[0].ts <= e.ts <= batch[-1].ts])


def _schedule_with_a_long_job(spec: Any, now: float) -> tuple[int, JobSchedule]:
    """A seed whose schedule runs a job on the node from before the faults until now."""
    for seed in range(1, 500):
        schedule = JobSchedule((spec,), seed)
        job = schedule.job_at(spec.index, now)
        if job is not None and job.start < now + APP_AT - 60:
            return seed, schedule
    raise AssertionError("no seed runs a long job now")


def _gpu_faults(reading: GpuReading, t: int) -> GpuReading:
    values = dict(reading.values)
    if reading.gpu.index == 3:  # contained ECC error: a row remapped, waiting for a reset
        # Exactly the planted one: the simulator's own incidents (seed and time dependent) left out of
        # GPU 3's counters, or the page rightly counts two.
        planted = 1.0 if t >= ECC_AT else 0.0
        values["ecc_uncorrected"] = planted
        values["remapped_rows_uncorrectable"] = planted
        values["remap_pending"] = planted
    if reading.gpu.index == 5 and t >= NVLINK_AT:  # a link failed and retrained
        values["nvlink_recovery_errors"] += 1
        values["nvlink_replay_errors"] += 5
    return dataclasses.replace(reading, values=values)


def _port_faults(reading: PortReading, t: int) -> PortReading:
    if reading.port.device != "mlx5_2":
        return reading
    values = dict(reading.values)
    for start, samples in FLAPS:
        if t >= start:  # each time: one link-down, one recovery, a burst of symbol errors
            values["link_downed"] += 1
            values["link_error_recovery"] += 1
            values["symbol_errors"] += 40
        if start <= t < start + samples * STEP_S:
            values["state"], values["phys_state"] = 1.0, 2.0  # Down, Polling
    return dataclasses.replace(reading, values=values)


def _push_quiet_node(collector: RunningCollector, now: float) -> None:
    """Two PCIe GPUs, no NVLink, no InfiniBand, no job: nothing to report."""
    origin = Origin("prod", "rack-09", QUIET, "nvml", str(uuid.uuid4()))
    gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "NVIDIA L40S", f"00000000:{i + 1:02X}:00.0") for i in range(2)]
    snapshots = [
        Snapshot(
            now + t,
            tuple(
                GpuReading(g, True, {"util_pct": 0.0, "power_w": 35.0, "energy_j": 5e6 + 35.0 * (t + HISTORY_S),
                                     "ecc_corrected": 0.0, "ecc_uncorrected": 0.0, "remap_pending": 0.0,
                                     "remap_failure": 0.0})
                for g in gpus
            ),
            (),
        )
        for t in range(-HISTORY_S, 0, STEP_S)
    ]  # fmt: skip
    push_binary(collector, origin, 0, snapshots)


def test_the_node_page_says_what_is_wrong_and_since_when(dashboard: str, browser: Any) -> None:
    open_page(browser, f"{dashboard}/node/{NODE}")
    found, severities = _findings(browser)
    assert severities == sorted(severities), "GPUs and ports with critical findings first"
    assert list(found)[-1] == "mlx5_2 port 1", "a port that flapped and is up again is a warning"
    assert _one(found["GPU 3"], "1 uncorrectable ECC error since").endswith("have it serviced if they recur")
    ecc = "XIDs 48 (Double Bit ECC Error), 63 (ECC page retirement or row remapping recording event), 94 ("
    incident = _one(found["GPU 3"], ecc + "Contained ECC error) since")
    assert "last at" not in incident, "one incident, at one time"
    assert incident.endswith("Uncorrectable ECC error: drain and reset the GPU (row remap)"), "the cause's action"
    pending = _one(found["GPU 3"], "row remap pending since")
    assert _minutes_ago(pending) in (25, 26) and pending.endswith(
        "Reset the GPU once it is drained, to apply the remap"
    )
    _one(found["GPU 5"], "XID 74 (NVLINK Error) since")
    _one(found["GPU 5"], "1 NVLink link recovery since")
    flapped = _one(found["mlx5_2 port 1"], "link went down 2 times since")
    assert _minutes_ago(flapped) in (20, 21) and ", last at " in flapped and "reseat or replace the cable" in flapped
    _one(found["mlx5_2 port 1"], "80 symbol errors, 2 link error recoveries since")
    assert "GPU 1" not in found, "application XIDs are the job's: in the XID table only"
    assert not {"mlx5_0 port 1", "mlx5_1 port 1", "mlx5_3 port 1", "node"} & set(found), "the other ports are fine"

    job = browser.find_element("css selector", "#node-jobs-table tbody tr")
    assert job.text.split()[2:3] == ["running"] and job.text.endswith("0-7")
    link = job.find_element("tag name", "a")
    assert link.get_attribute("href") == f"{dashboard}/jobs/{quote(link.text, safe='')}"

    xids = browser.find_elements("css selector", "#node-xid-table tbody tr")
    codes = [row.find_elements("tag name", "td")[2].text for row in xids]
    assert codes[0] == "74" and sorted(codes) == ["13", "43", "48", "63", "74", "94"], "newest first"
    kinds = {row.find_elements("tag name", "td")[2].text: row.get_attribute("class") for row in xids}
    assert kinds["48"] == kinds["74"] == "row-critical" and kinds["13"] == kinds["43"] == "row"
    assert "restart it" in _row(browser, "node-xid-table", 2, "13").text

    memory = _row(browser, "node-memory-table", 0, "GPU 3")
    assert memory.get_attribute("class") == "row-critical" and "1 error in range, 1 total" in memory.text
    assert "yes, since" in memory.text and "drain and reset the GPU" in memory.text
    port = _row(browser, "node-ib-table", 0, "mlx5_2 port 1")
    assert port.get_attribute("class") == "row-warning" and "Active (LinkUp) since" in port.text, "up again"
    assert "2 times in range, 2 total" in port.text and "80 errors in range" in port.text and "400 Gbit/s" in port.text
    healthy = _row(browser, "node-ib-table", 0, "mlx5_0 port 1")
    assert healthy.get_attribute("class") == "row" and "Active (LinkUp), the whole range" in healthy.text

    nvlink = _row(browser, "node-nvlink-table", 0, "GPU 5")
    assert nvlink.get_attribute("class") == "row-warning" and "1 recovery in range, 1 total" in nvlink.text
    assert "GB/s" in _row(browser, "node-nvlink-table", 0, "GPU 0").text
    assert len(graph_data(browser, "node-nvlink-graph")) == 8

    energy = browser.find_element("id", "node-energy-table").text
    total = _row(browser, "node-energy-table", 0, "node (GPUs)").text.split()
    kwh, watts = float(total[2]), float(total[4])
    assert total[3] == "kWh" and total[5] == "W" and 8 * 60 < watts < 8 * 700, "eight H100s' draw"
    assert kwh == pytest.approx(watts * (HISTORY_S - STEP_S) / 3.6e6, rel=0.05), "the mean power over the range"
    assert "of 60 min" in energy
    assert console_errors(browser) == []
    _full_page_screenshot(browser, "node-health")


def test_a_quiet_node_says_so_rather_than_showing_empty_charts(dashboard: str, browser: Any) -> None:
    open_page(browser, f"{dashboard}/node/{QUIET}?range=15m")
    page = browser.find_element("id", "page").text
    assert "Nothing needs an operator in this range" in page
    assert "No job held this node's GPUs in this range." in page and "No XID errors in this range." in page
    assert "No InfiniBand ports on this node." in page
    rows = browser.find_elements("css selector", "#node-nvlink-table tbody tr")
    assert [r.text for r in rows] == ["GPU 0 no NVLink reported", "GPU 1 no NVLink reported"]
    annotation = browser.execute_script(
        "return document.querySelector('#node-nvlink-graph .js-plotly-plot').layout.annotations[0].text"
    )
    assert annotation == "No NVLink reported by this node's GPUs."
    assert "35 W" in _row(browser, "node-energy-table", 0, "GPU 0").text
    assert console_errors(browser) == []


def test_a_hot_gpu_that_slows_its_job_is_named_with_its_slowdown_temperature_and_job(busy: str, browser: Any) -> None:
    open_page(browser, f"{busy}/node/{busy_cluster.HOT[0]}")
    found, severities = _findings(browser)
    assert list(found) == ["GPU 2"] and severities == ["findings-of findings-warning"], found
    slowed = _one(found["GPU 2"], "clocks held down: HW thermal slowdown since")
    assert _minutes_ago(slowed) in HOT_SINCE_MIN and "cooling and fans" in slowed
    hot = next(item for item in found["GPU 2"] if " °C, at or above the 85 °C alert threshold since" in item)
    assert 90 <= int(hot.split()[0]) <= 105 and _minutes_ago(hot) in HOT_SINCE_MIN, hot
    straggler = _one(found["GPU 2"], "straggler of job train-7: thermal, ~")
    slower = re.search(r"~(\d+)% slower since", straggler)
    assert slower and 10 <= int(slower[1]) <= 30, straggler
    assert _minutes_ago(straggler) in HOT_SINCE_MIN and "The whole job waits for it" in straggler
    finding_link = browser.find_element("css selector", "#node-findings .finding-job")
    assert finding_link.get_attribute("href") == f"{busy}/jobs/train-7", "the straggler's job, from the finding"
    link = browser.find_element("css selector", "#node-jobs-table tbody tr a")
    assert link.text == "train-7" and link.get_attribute("href") == f"{busy}/jobs/train-7", "the job, a click away"
    assert console_errors(browser) == []

    open_page(browser, f"{busy}/node/gpu-a01")
    assert "Nothing needs an operator in this range" in browser.find_element("id", "node-findings").text, (
        "the ranks that wait for the straggler are not at fault"
    )
    open_page(browser, f"{busy}/node/gpu-b01")
    found, _ = _findings(browser)
    assert set(found) == {"GPU 3", "GPUs 2, 3"}, "hot, reporting no clock event reasons: no slowdown named"
    assert [item.split(":")[0] for item in found["GPUs 2, 3"]] == ["held idle by job eval-3 (bob)"]
    (hot,) = found["GPU 3"]
    assert hot.startswith("91 °C, at or above the 85 °C alert threshold since") and _minutes_ago(hot) in (30, 31)


def test_ib_states_in_words() -> None:
    assert state_words(4, 5) == "Active (LinkUp)"
    assert state_words(1, 2) == "Down (Polling)" and state_words(1, 3) == "Down (Disabled)"
    assert state_words(2, None) == "Initializing" and state_words(None, 5) == "not reported"


def test_each_xid_comes_with_nvidias_words_and_what_to_do() -> None:
    def event(code: int | None) -> query.EventRow:
        return query.EventRow(datetime.now(UTC), "c", "r", "n", 0, "GPU-x", "xid", code, 1, None)

    fell = xid(event(79))
    assert (fell.meaning, fell.hardware) == ("GPU has fallen off the bus", True) and "drain the node" in fell.action
    assert xid(event(13)).hardware is False, "an application fault is the job's owner's"
    assert xid(event(0)).meaning == "Unknown XID" and "dmesg" in xid(event(0)).action
    assert "XID catalogue" in xid(event(9999)).action and xid(event(9999)).hardware


def test_findings_name_a_port_down_now_and_a_node_whose_gpus_all_went_quiet() -> None:
    now = datetime.now(UTC)
    window = query.TimeRange(now - timedelta(hours=1), now)
    gpus = [
        query.GpuHealth(Summary(now - timedelta(minutes=30), {}, {}), query.GpuRow(i, "c", "r", "n", i, "u"))
        for i in range(2)
    ]
    down = Summary(
        now,
        {"link_downed": CounterUse(1, 1, now, now)},
        {"state": StateUse(1, now - timedelta(minutes=5), 1, now), "phys_state": StateUse(3, None, 0, None)},
    )
    ports = [query.PortHealth(down, query.PortRow(1, "c", "r", "n", "mlx5_0", 1))]
    empty = query.NvlinkSeries(60, [0, 1], [], _nan(2), _nan(2))
    found = findings(NodeHealth(window, gpus, ports, [], [], {}, empty))
    assert [(f.severity, f.subject, f.what) for f in found] == [
        ("critical", "mlx5_0 port 1", "Down (Disabled)"),
        ("critical", "node", "no GPU answers"),
    ], "down now is not also 'flapping'; GPUs all silent are one finding"
    assert found[1].since == now - timedelta(minutes=30)


def test_gpu_indices_as_runs_and_long_ranges_read_less_often() -> None:
    assert indices([0, 1, 2, 3, 6]) == "0-3, 6" and indices([4, 5]) == "4, 5" and indices([]) == "-"
    assert [health_due(n, "24h", 5000) for n in (None, 1, 11, 12)] == [True, False, False, True]
    assert all(health_due(n, "1h", 5000) for n in range(5)), "an hour is read at every refresh"


MINUTE = timedelta(minutes=1)


def _throttled(
    reasons: list[int | None], temps: list[float | None], last_seen: timedelta = timedelta(0), lead: timedelta = MINUTE
) -> NodeHealth:
    """One GPU (index 2, id 7) answering `last_seen` ago, with one minute bucket per value, the newest a
    minute ago; the range starts `lead` before the first bucket (negative: inside it, as the first
    bucket's aligned start is read whole)."""
    now = datetime.now(UTC)
    times = [now - MINUTE * (len(reasons) - i) for i in range(len(reasons))]
    window = query.TimeRange(times[0] - lead, now)
    gpu = query.GpuHealth(Summary(now - last_seen, {}, {}), query.GpuRow(7, "c", "r", "n", 2, "u"))
    empty = query.NvlinkSeries(60, [7], [], _nan(1), _nan(1))
    return NodeHealth(window, [gpu], [], [], [], {}, empty, {7: query.Throttling(times, reasons, temps)})


def test_a_thermal_or_power_slowdown_now_is_named_since_its_run_began() -> None:
    health = _throttled([0x40, 0, 0x40, None, 0x40 | 0x8, 0x40], [None] * 6)
    (found,) = findings(health)
    assert (found.severity, found.subject, found.what) == ("warning", "GPU 2", "clocks held down: HW thermal slowdown")
    assert found.since == health.throttling[7].times[2], "a bucket without samples does not break the run"
    assert found.action == COOL

    (both,) = findings(_throttled([0x40, 0x48], [None, None]))
    assert both.what == "clocks held down: HW slowdown, HW thermal slowdown"
    (brake,) = findings(_throttled([0x80] * 3, [None] * 3, lead=-timedelta(seconds=30)))
    assert brake.what == "clocks held down: HW power brake" and brake.action == CHECK_POWER
    assert brake.since is None, "throttled since the range's first bucket: since before the range"
    assert findings(_throttled([0x40, 0x40, 0], [None] * 3)) == [], "over: nothing now"


def test_reasons_that_are_no_slowdown_are_not_findings() -> None:
    idle, power_cap, clocks_set, sync_boost = 0x1, 0x4, 0x2, 0x10
    for bits in (idle, power_cap, clocks_set, sync_boost, idle | power_cap):
        assert findings(_throttled([bits] * 3, [60.0] * 3)) == [], hex(bits)


def test_a_gpu_at_the_alert_threshold_is_too_hot_and_one_degree_under_is_not() -> None:
    assert findings(_throttled([None], [84.0])) == [] and findings(_throttled([None] * 3, [90.0, 90.0, 84.0])) == []
    (at,) = findings(_throttled([None], [85.0]))
    assert at.what == "85 °C, at or above the 85 °C alert threshold" and at.severity == "warning"
    health = _throttled([None] * 4, [90.0, 84.0, 85.0, 88.4])
    (hot,) = findings(health)
    assert hot.what == "88 °C, at or above the 85 °C alert threshold"
    assert hot.since == health.throttling[7].times[2], "since it went over again"


def test_the_temperature_threshold_is_the_shipped_alert_rules() -> None:
    rules = {rule.alert: rule for group in parse_rules(default_rules_text()) for rule in group.rules}
    assert f"temp_c >= {OVER_TEMPERATURE_C:g}" in rules["GpuOverTemperature"].expr


def test_a_silent_gpu_says_nothing_about_its_clocks_now() -> None:
    found = findings(_throttled([0x40] * 3, [97.0] * 3, last_seen=timedelta(minutes=10)))
    assert [(f.severity, f.subject, f.what) for f in found] == [("critical", "node", "no GPU answers")]


def test_a_straggler_is_named_with_its_job_cause_and_slowdown() -> None:
    now = datetime.now(UTC)
    window = query.TimeRange(now - timedelta(hours=1), now)

    def straggler(gpu: int | None, nic: str | None, cause: str) -> StragglerRow:
        started = now - 10 * MINUTE
        port = 1 if nic else None
        return StragglerRow("train-7", "c", "r", "n", gpu, None, nic, port, cause, 0.21, {}, started, now, None)

    gpus = [query.GpuHealth(Summary(now, {}, {}), query.GpuRow(i, "c", "r", "n", i, "u")) for i in range(4)]
    stragglers = [straggler(2, None, "thermal"), straggler(None, "mlx5_3", "slow_nic"), straggler(None, None, "x")]
    empty = query.NvlinkSeries(60, [0, 1, 2, 3], [], _nan(4), _nan(4))
    found = findings(NodeHealth(window, gpus, [], [], [], {}, empty, stragglers=stragglers))
    assert [(f.severity, f.subject, f.what) for f in found] == [
        ("warning", "GPU 2", "straggler of job train-7: thermal, ~21% slower"),
        ("warning", "mlx5_3 port 1", "straggler of job train-7: slow_nic, ~21% slower"),
        ("warning", "node", "straggler of job train-7: x, ~21% slower"),
    ]
    assert all(f.since == now - 10 * MINUTE for f in found)
    assert "cool the GPU" in found[0].action and "switch port" in found[1].action and "peers" in found[2].action


def test_a_slowdown_asserted_in_some_samples_reads_as_one_run_not_as_their_mean(postgres: EmbeddedPostgres) -> None:
    """Every other sample of the last 10 minutes sets HW thermal slowdown (0x40): a mean of the masks would
    read 0x20, SW thermal slowdown, and a run of single samples would begin 5 s ago."""
    now = time.time()
    origin = Origin("c", "r", "duty-01", "nvml", str(uuid.uuid4()))
    gpu = GpuIdentity(0, f"GPU-{uuid.uuid4()}", "H100", "00:00")
    snapshots = [
        Snapshot(now + t, (GpuReading(gpu, True, {"clock_event_reasons": 0x40 * (t // 5 % 2), "temp_c": 80.0}),), ())
        for t in range(-600, 0, 5)
    ]
    dsn = new_database(postgres)
    with running_collector(dsn) as collector, open_read_pool(dsn, max_size=1) as pool:
        push_binary(collector, origin, 0, snapshots)
        health = load_node_health(pool, "duty-01", "15m")
    assert health is not None
    (found,) = findings(health)
    assert (found.subject, found.what) == ("GPU 0", "clocks held down: HW thermal slowdown")
    # The first sample asserting it is 595 s old, and a run begins at its minute: 595 s to 655 s ago.
    assert found.since and timedelta(seconds=595) <= datetime.now(UTC) - found.since < timedelta(minutes=11.5)


def _findings(browser: Any) -> tuple[dict[str, list[str]], list[str]]:
    """The findings panel: subject -> its findings' lines; and each box's classes, top to bottom."""
    groups = browser.find_elements("css selector", "#node-findings-list .findings-of")
    found = {
        group.find_element("tag name", "strong").text: [
            li.text.replace("\n", " ") for li in group.find_elements("tag name", "li")
        ]
        for group in groups
    }
    return found, [group.get_attribute("class") for group in groups]


def _nan(rows: int) -> np.ndarray:
    return np.full((rows, 0), np.nan)


def _minutes_ago(text: str) -> int:
    found = re.search(r"\((\d+) min ago\)", text)
    assert found, text
    return int(found[1])


def _one(items: list[str], start: str) -> str:
    found = [item for item in items if item.startswith(start)]
    assert len(found) == 1, (start, items)
    return found[0]


def _row(browser: Any, table: str, column: int, text: str) -> Any:
    for row in browser.find_elements("css selector", f"#{table} tbody tr"):
        cells = row.find_elements("tag name", "td")
        if cells and cells[column].text == text:
            return row
    raise AssertionError(f"no row {text!r} in {table}")


def _full_page_screenshot(browser: Any, name: str) -> None:
    height = browser.execute_script("return document.body.scrollHeight")
    size = browser.get_window_size()
    browser.set_window_size(size["width"], height + 100)
    try:
        screenshot(browser, name)
    finally:
        browser.set_window_size(size["width"], size["height"])
