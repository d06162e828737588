"""The evidence rules over hand-built telemetry, one node per case, in a real database: what each rule
finds, when and how grave, and what it must leave alone (a counter restarted by a driver reload, an
application's XID, one IB blip, heat at the power cap, one slow job, a gap in the samples). The window
is (T0, T0 + 10 min]; windows that tile it find the same, and a window read again finds nothing new."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import psycopg
import pytest

from gpuscope.bench.health_evidence import measure
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.health.evidence import evidence_key
from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.crossing import Occurrence, crossings
from tests.conftest import new_database
from tests.health.helpers import T0, Telemetry, at, every_step, find, on_node

SINCE, UNTIL = at(0), at(600)
SUSPECT, UNHEALTHY, IGNORE = Severity.SUSPECT, Severity.UNHEALTHY, Severity.IGNORE
RECOVERY_MESSAGE = "Xid 154 GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"


@dataclass(frozen=True)
class Fleet:
    dsn: str
    nodes: dict[str, int]
    found: list[Evidence]  # over (SINCE, UNTIL]

    def on(self, node: str) -> list[tuple[Any, ...]]:
        """The node's findings in brief: kind, GPU index, seconds after T0, severity, action, code."""
        return [
            (e.kind, e.gpu_index, (e.at - T0).total_seconds(), e.severity, e.action, e.code)
            for e in on_node(self.found, self.nodes[node])
        ]

    def detail(self, node: str, kind: str) -> list[str]:
        return [e.detail for e in on_node(self.found, self.nodes[node]) if e.kind == kind]


@pytest.fixture(scope="module")
def fleet(postgres: EmbeddedPostgres) -> Iterator[Fleet]:
    dsn = new_database(postgres)
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        nodes = {
            name: telemetry.node(name)
            for name in ("xid", "ecc", "remap", "lost", "nvlink", "ib", "thermal", "straggler", "quiet")
        }
        _xids(telemetry, nodes["xid"])
        _ecc(telemetry, nodes["ecc"])
        _remap(telemetry, nodes["remap"])
        _lost(telemetry, nodes["lost"])
        _nvlink(telemetry, nodes["nvlink"])
        _ib(telemetry, nodes["ib"])
        _thermal(telemetry, nodes["thermal"])
        _stragglers(telemetry, nodes["straggler"])
        _quiet(telemetry, nodes["quiet"])
    yield Fleet(dsn, nodes, find(dsn, SINCE, UNTIL))


def test_xids_through_the_catalogue(fleet: Fleet) -> None:
    assert fleet.on("xid") == [
        ("xid", 3, 100, UNHEALTHY, "reboot_node", 79),
        ("xid", 1, 200, IGNORE, "app_error", 13),
        ("xid", 0, 300, SUSPECT, "unknown: see NVIDIA's catalogue", 999),
        ("xid", 2, 400, UNHEALTHY, "reboot_node", 154),
        ("xid", 1, 600, SUSPECT, "reset_gpu", 94),
    ], "not the XID at the window's start (it belongs to the window before) nor the one before it"
    details = fleet.detail("xid", "xid")
    assert details[0] == "XID 79 (GPU has fallen off the bus) on GPU 3"
    assert details[-1] == "XID 94 (Contained ECC error) on GPU 1, 3 times"


def test_uncorrectable_ecc_counts_rises_not_restarts(fleet: Fleet) -> None:
    assert [f for f in fleet.on("ecc") if f[0] == "ecc_uncorrectable"] == [
        ("ecc_uncorrectable", 0, 250, UNHEALTHY, "reset_gpu", None),
        ("ecc_uncorrectable", 3, 310, UNHEALTHY, "reset_gpu", None),  # across an outage
        ("ecc_uncorrectable", 2, 400, UNHEALTHY, "reset_gpu", None),  # from zero, after the reload
    ], "GPU 1's drop to 0 at the driver's reload is no error, and neither is GPU 2's"
    assert (
        fleet.detail("ecc", "ecc_uncorrectable")[2] == "1 uncorrectable ECC error on GPU 2 (1 since the driver loaded)"
    )


def test_row_remap_pending_is_suspect_and_failed_unhealthy(fleet: Fleet) -> None:
    assert fleet.on("remap") == [
        ("remap_pending", 0, 250, SUSPECT, "reset_gpu", None),
        ("remap_failed", 2, 400, UNHEALTHY, "drain_rma", None),
    ], "GPU 1, pending since before the window, was reported when it turned"


def test_a_lost_gpu_is_found_once_and_a_gap_is_not_a_loss(fleet: Fleet) -> None:
    assert fleet.on("lost") == [("gpu_lost", 0, 300, UNHEALTHY, "reboot_node", None)], (
        "the exporter's event and the sample are one finding; GPU 1's silence and GPU 2, down all along, none"
    )


def test_nvlink_recoveries_and_crc_bursts_over_an_hour(fleet: Fleet) -> None:
    assert fleet.on("nvlink") == [
        ("nvlink_flap", 0, 100, SUSPECT, "check_link", None),
        ("nvlink_flap", 2, 150, SUSPECT, "check_link", None),
        ("nvlink_flap", 0, 300, UNHEALTHY, "check_link", None),
    ], "the second recovery crosses nothing; a reload's drop (GPU 1) and 50 CRC errors a second (GPU 3) are no flaps"
    [*_, unhealthy] = fleet.detail("nvlink", "nvlink_flap")
    assert unhealthy == "NVLink flapping on GPU 0: 3 link recoveries or CRC bursts in 1 h"


def test_ib_flaps_over_six_hours(fleet: Fleet) -> None:
    ports = _ports(fleet)
    assert fleet.on("ib") == [
        ("ib_flap", None, 200, SUSPECT, "check_link", ports["mlx5_2"]),  # with one 3 hours before
        ("ib_flap", None, 200, SUSPECT, "check_link", ports["mlx5_3"]),
        ("ib_flap", None, 300, SUSPECT, "check_link", ports["mlx5_1"]),
        ("ib_flap", None, 500, UNHEALTHY, "check_link", ports["mlx5_3"]),
    ], "one blip (mlx5_0), a reload's drop (mlx5_4) and a flap 7 hours back with one now (mlx5_5) are below"
    assert fleet.detail("ib", "ib_flap")[0] == "InfiniBand mlx5_2 port 1 flapped 2 times in 6 h"


def test_thermal_slowdown_at_normal_load(fleet: Fleet) -> None:
    assert fleet.on("thermal") == [("thermal_slowdown", 0, 590, SUSPECT, "check_cooling", None)], (
        "its 90th slowed sample in 30 min; GPU 1 at its power cap and GPU 2's 20 samples are not"
    )
    [detail] = fleet.detail("thermal", "thermal_slowdown")
    assert detail == "GPU 0 slowed (hw thermal slowdown) in 90 samples of 30 min while under 90% of its power limit"


def test_a_gpu_straggling_in_two_jobs_in_a_week(fleet: Fleet) -> None:
    assert fleet.on("straggler") == [
        ("repeat_straggler", 0, 120, SUSPECT, "run_diagnostics", None),
        ("repeat_straggler", None, 200, SUSPECT, "run_diagnostics", None),
    ], "not one job twice (GPU 1), not jobs 8 days apart (GPU 2); the node itself slowing two jobs: the node"
    assert fleet.detail("straggler", "repeat_straggler") == [
        "GPU 0 was the straggler in 2 jobs within 7 days: job-a (thermal), job-b (power_cap)",
        "The node was the straggler in 2 jobs within 7 days: job-f (slow_nic), job-g (slow_nic)",
    ]


def test_a_healthy_node_has_no_evidence(fleet: Fleet) -> None:
    assert fleet.on("quiet") == [], "nor its GPU and port first seen inside the window, with counts from before"


def test_findings_name_their_gpu_on_their_node(fleet: Fleet) -> None:
    with psycopg.connect(fleet.dsn) as conn:
        gpus = {g: (n, i) for g, n, i in conn.execute("SELECT gpu_id, node_id, gpu_index FROM gpu").fetchall()}
    on_gpus = [e for e in fleet.found if e.gpu_id is not None]
    assert on_gpus and all(gpus[e.gpu_id] == (e.node_id, e.gpu_index) for e in on_gpus)
    assert all(SINCE < e.at <= UNTIL for e in fleet.found)


def test_windows_that_tile_find_the_same_and_a_window_read_again_finds_nothing_new(fleet: Fleet) -> None:
    whole = {evidence_key(e) for e in fleet.found}
    halves = find(fleet.dsn, SINCE, at(300)) + find(fleet.dsn, at(300), UNTIL)
    assert {evidence_key(e) for e in halves} == whole and len(halves) == len(whole)
    assert find(fleet.dsn, SINCE, UNTIL) == fleet.found
    overlapping = {evidence_key(e) for e in find(fleet.dsn, at(-300), at(300))}
    assert {k for k in whole if k[-1] <= at(300)} <= overlapping


def test_a_crossing_is_where_the_total_reaches_a_threshold() -> None:
    window, thresholds = timedelta(minutes=10), [(2, SUSPECT), (3, UNHEALTHY)]
    seen = [Occurrence(at(t), 1) for t in (0, 60, 120, 700, 1400)]
    found = [(c.at, c.total, c.severity) for c in crossings(seen, window, thresholds, at(-1))]
    # 700's ten minutes hold 120 and itself: 2 again, from 1 without it. 1400's hold itself only.
    assert found == [(at(60), 2, SUSPECT), (at(120), 3, UNHEALTHY), (at(700), 2, SUSPECT)]
    assert [c.severity for c in crossings([Occurrence(at(0), 5)], window, thresholds, at(-1))] == [UNHEALTHY]
    later = [(c.at, c.total) for c in crossings(seen, window, thresholds, at(650))]
    assert later == [(at(700), 2)], "what came before `after` counts; its own crossings are not reported again"


def test_the_bench_fleet_shows_every_rule(postgres: EmbeddedPostgres) -> None:
    figures = measure(new_database(postgres), nodes=4)
    assert set(figures["findings_by_kind"]) == {
        "xid", "gpu_lost", "ecc_uncorrectable", "remap_pending", "nvlink_flap", "ib_flap", "thermal_slowdown",
        "repeat_straggler",
    }  # fmt: skip
    assert figures["gpus"] == 32 and 0 < figures["cycle_ms_p50"] <= figures["cycle_ms_max"]


# The cases. Samples every 10 s from 2 minutes before the window (longer where a rule looks back).


def _xids(telemetry: Telemetry, node: int) -> None:
    gpus = telemetry.gpus(node, 4)
    telemetry.event(node, gpus[0], -5, "xid", 48)  # before the window
    telemetry.event(node, gpus[1], 0, "xid", 31)  # at its start: the window before's
    telemetry.event(node, gpus[3], 100, "xid", 79)
    telemetry.event(node, gpus[1], 200, "xid", 13)
    telemetry.event(node, gpus[0], 300, "xid", 999)
    telemetry.event(node, gpus[2], 400, "xid", 154, RECOVERY_MESSAGE)
    telemetry.event(node, gpus[1], 600, "xid", 94, count=3)


def _ecc(telemetry: Telemetry, node: int) -> None:
    rising, reloaded, reloaded_then_error, through_outage = telemetry.gpus(node, 4)
    steps = every_step(-120, 600)
    telemetry.gpu_samples(rising, {t: {"ecc_uncorrected": int(t >= 250), "ecc_corrected": 5} for t in steps})
    telemetry.gpu_samples(reloaded, {t: {"ecc_uncorrected": 2 if t < 300 else 0} for t in steps})
    telemetry.gpu_samples(
        reloaded_then_error,
        {t: {"ecc_uncorrected": 2 if t < 300 else int(t >= 400), "ecc_corrected": 0 if t < 300 else t} for t in steps},
    )
    telemetry.gpu_samples(
        through_outage,
        {t: {"up": False} if 200 <= t < 310 else {"ecc_uncorrected": int(t >= 310)} for t in steps},
    )


def _remap(telemetry: Telemetry, node: int) -> None:
    turning, all_along, failing = telemetry.gpus(node, 3)
    steps = every_step(-120, 600)
    telemetry.gpu_samples(turning, {t: {"remap_pending": int(t >= 250), "remap_failure": 0} for t in steps})
    telemetry.gpu_samples(all_along, {t: {"remap_pending": 1, "remap_failure": 0} for t in steps})
    telemetry.gpu_samples(failing, {t: {"remap_pending": 0, "remap_failure": int(t >= 400)} for t in steps})


def _lost(telemetry: Telemetry, node: int) -> None:
    lost, gap, down = telemetry.gpus(node, 3)
    steps = every_step(-120, 600)
    telemetry.gpu_samples(lost, {t: {"up": t < 300} for t in steps})
    telemetry.event(node, lost, 300, "gpu_lost")
    telemetry.gpu_samples(gap, {t: None if 200 <= t <= 400 else {"power_w": 400} for t in steps})
    telemetry.gpu_samples(down, {t: {"up": False} for t in steps})


def _nvlink(telemetry: Telemetry, node: int) -> None:
    recovering, reloaded, burst, trickle = telemetry.gpus(node, 4)
    steps = every_step(-120, 600)
    counters = {"nvlink_crc_errors": 0, "nvlink_replay_errors": 0}
    telemetry.gpu_samples(
        recovering, {t: {**counters, "nvlink_recovery_errors": sum(t >= s for s in (100, 200, 300))} for t in steps}
    )
    telemetry.gpu_samples(reloaded, {t: {**counters, "nvlink_recovery_errors": 40 if t < 300 else 0} for t in steps})
    telemetry.gpu_samples(
        burst, {t: {"nvlink_crc_errors": 1000 if t < 150 else 6000, "nvlink_recovery_errors": 0} for t in steps}
    )
    telemetry.gpu_samples(
        trickle, {t: {"nvlink_crc_errors": 50 * (t + 120), "nvlink_recovery_errors": 0} for t in steps}
    )


def _ib(telemetry: Telemetry, node: int) -> None:
    ports = [telemetry.port(node, f"mlx5_{i}") for i in range(6)]
    steps = list(every_step(-120, 600))
    blip, twice, with_history, recovering, reloaded, long_ago = ports
    telemetry.port_samples(blip, _flapping(steps, downs=[200]))
    telemetry.port_samples(twice, _flapping(steps, downs=[100, 300]))
    telemetry.port_samples(with_history, _flapping([-10810, -10800, -10790, *steps], downs=[-10800, 200]))
    recoveries = {t: sum(t >= s for s in range(100, 501, 100)) for t in steps}
    telemetry.port_samples(recovering, {t: {"state": 4, "link_error_recovery": n} for t, n in recoveries.items()})
    telemetry.port_samples(reloaded, {t: {"state": 4, "link_downed": 7 if t < 300 else 0} for t in steps})
    telemetry.port_samples(long_ago, _flapping([-25210, -25200, -25190, *steps], downs=[-25200, 200]))


def _flapping(steps: list[int], downs: list[int]) -> dict[int, dict[str, Any]]:
    """A port down for one sample at each of `downs`, its link_downed counting them."""
    return {
        t: {"state": 1 if t in downs else 4, "link_downed": sum(t >= d for d in downs), "link_error_recovery": 0}
        for t in steps
    }


def _thermal(telemetry: Telemetry, node: int) -> None:
    hot, capped, brief = telemetry.gpus(node, 3)
    steps = every_step(-1800, 600)
    normal = {"clock_event_reasons": 0, "power_w": 500.0, "power_limit_w": 700.0}
    slowed = {"clock_event_reasons": 0x40, "power_w": 300.0, "power_limit_w": 700.0}
    telemetry.gpu_samples(hot, {t: slowed if t >= -300 else normal for t in steps})
    telemetry.gpu_samples(
        capped, {t: {"clock_event_reasons": 0x44, "power_w": 695.0, "power_limit_w": 700.0} for t in steps}
    )
    telemetry.gpu_samples(brief, {t: slowed if 100 <= t < 300 else normal for t in steps})


def _stragglers(telemetry: Telemetry, node: int) -> None:
    two_jobs, one_job, a_week_apart = telemetry.gpus(node, 3)
    telemetry.straggler("job-a", node, two_jobs, T0 - timedelta(days=2))
    telemetry.straggler("job-b", node, two_jobs, at(120), cause="power_cap")
    telemetry.straggler("job-c", node, one_job, T0 - timedelta(days=1))
    telemetry.straggler("job-c", node, one_job, at(200))
    telemetry.straggler("job-d", node, a_week_apart, T0 - timedelta(days=8))
    telemetry.straggler("job-e", node, a_week_apart, at(300))
    telemetry.straggler("job-f", node, None, at(100), cause="slow_nic")
    telemetry.straggler("job-g", node, None, at(200), cause="slow_nic")


def _quiet(telemetry: Telemetry, node: int) -> None:
    gpus = telemetry.gpus(node, 2)
    port = telemetry.port(node, "mlx5_0")
    steps = every_step(-120, 600)
    healthy = {
        "ecc_uncorrected": 0,
        "remap_pending": 0,
        "remap_failure": 0,
        "nvlink_recovery_errors": 3,
        "nvlink_crc_errors": 10,
        "clock_event_reasons": 0x4,  # at its power cap: not heat
        "power_w": 700.0,
        "power_limit_w": 700.0,
    }
    for gpu in gpus:
        telemetry.gpu_samples(gpu, {t: healthy for t in steps})
    telemetry.port_samples(port, {t: {"state": 4, "link_downed": 2, "link_error_recovery": 1} for t in steps})
    # First seen inside the window, with counts from before: nothing to rise from, so no rise.
    newcomer, new_port = telemetry.gpu(node, 2), telemetry.port(node, "mlx5_1")
    telemetry.gpu_samples(
        newcomer, {t: {**healthy, "ecc_uncorrected": 3, "nvlink_recovery_errors": 7} for t in steps if t > 100}
    )
    telemetry.port_samples(
        new_port, {t: {"state": 4, "link_downed": 5, "link_error_recovery": 2} for t in steps if t > 100}
    )


def _ports(fleet: Fleet) -> dict[str, int]:
    with psycopg.connect(fleet.dsn) as conn:
        rows = conn.execute("SELECT device, port_id FROM ib_port WHERE node_id = %s", (fleet.nodes["ib"],)).fetchall()
    return dict(rows)
