"""The driver's recovery action (health/rules/recovery.py) over hand-built telemetry in a real database: a
finding once where the action turns to something (not every sample, not on none or absent, not again
after the GPU was lost a while), each action's severity and action, and XIDs judged by the driver's word
where it asks for something, by the catalogue otherwise. One GPU per case, each on a node of its own."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.health.model import Evidence, Severity
from gpuscope.health.rules.recovery import driver_verdict
from tests.conftest import new_database
from tests.health.fleet import Fleet
from tests.health.helpers import T0, Telemetry, at, every_step, find, on_node

SUSPECT, UNHEALTHY, IGNORE = Severity.SUSPECT, Severity.UNHEALTHY, Severity.IGNORE
SINCE, UNTIL = at(0), at(600)
SAMPLED = (-120, 600)
NONE, GPU_RESET, NODE_REBOOT, DRAIN_P2P = 0, 1, 2, 3

# node -> GPU 1's recovery action from each offset on (None: not reported, as a driver without the field)
ACTIONS: dict[str, Mapping[int, int | None]] = {
    "crossing": {-120: NONE, 200: NODE_REBOOT},  # stays at 2 for 400 s: one finding
    "none": {-120: NONE},
    "absent": {-120: None},  # an older driver or exporter
    "first_report": {-120: None, 100: DRAIN_P2P},  # absent to an action counts
    "before": {-120: NODE_REBOOT},  # asked before the window: found by the window before, not this one
    "changes": {-120: NONE, 100: DRAIN_P2P, 300: GPU_RESET, 400: NONE, 500: GPU_RESET},
    "lost": {-120: NONE, 100: NODE_REBOOT},  # and lost 200-300: answering again at 2 is no new finding
    "xid_asked": {-120: NONE, 50: NODE_REBOOT},
    "xid_before_asking": {-120: NONE, 350: NODE_REBOOT},
    "xid_stale": {-120: NONE, 0: NODE_REBOOT, 10: None},  # the word is 6 min old at the XID
}
XIDS = {"none": (150, 13), "xid_asked": (100, 13), "xid_before_asking": (300, 13), "xid_stale": (370, 13)}


@dataclass(frozen=True)
class Findings:
    dsn: str
    nodes: dict[str, int]
    found: list[Evidence]

    def on(self, node: str, kind: str = "recovery_action") -> list[tuple[Any, ...]]:
        """The node's findings of `kind`: GPU index, seconds after T0, severity, action, code."""
        return [
            (e.gpu_index, (e.at - T0).total_seconds(), e.severity, e.action, e.code)
            for e in on_node(self.found, self.nodes[node])
            if e.kind == kind
        ]

    def detail(self, node: str, kind: str) -> list[str]:
        return [e.detail for e in on_node(self.found, self.nodes[node]) if e.kind == kind]


def _action_at(changes: Mapping[int, int | None], t: int) -> int | None:
    return changes[max(start for start in changes if start <= t)]


@pytest.fixture(scope="module")
def recovery(postgres: EmbeddedPostgres) -> Iterator[Findings]:
    dsn = new_database(postgres)
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        nodes = {name: telemetry.node(name) for name in ACTIONS}
        for name, changes in ACTIONS.items():
            gpus = telemetry.gpus(nodes[name], 2)
            samples: dict[int, dict[str, Any] | None] = {}
            for t in every_step(*SAMPLED):
                lost = name == "lost" and 200 <= t <= 300
                action = None if lost else _action_at(changes, t)
                samples[t] = {"up": not lost, "temp_c": None if lost else 60.0, "recovery_action": action}
            telemetry.gpu_samples(gpus[1], samples)
            telemetry.gpu_samples(gpus[0], {t: {"recovery_action": NONE} for t in every_step(*SAMPLED)})
            if name in XIDS:
                seconds, code = XIDS[name]
                telemetry.event(nodes[name], gpus[1], seconds, "xid", code)
    yield Findings(dsn, nodes, find(dsn, SINCE, UNTIL))


def test_a_crossing_is_found_once_not_at_every_sample(recovery: Findings) -> None:
    assert recovery.on("crossing") == [(1, 200, UNHEALTHY, "reboot_node", NODE_REBOOT)]
    assert recovery.detail("crossing", "recovery_action") == [
        "the driver asks for a node reboot (NVML recovery action 2) on GPU 1"
    ]


def test_none_and_absent_find_nothing(recovery: Findings) -> None:
    for node in ("none", "absent"):
        assert recovery.on(node) == [], node


def test_the_first_report_of_an_action_counts_and_one_before_the_window_does_not(recovery: Findings) -> None:
    assert recovery.on("first_report") == [(1, 100, SUSPECT, "drain_p2p", DRAIN_P2P)]
    assert recovery.on("before") == [], "the window before found it"


def test_each_change_to_an_action_is_a_finding(recovery: Findings) -> None:
    assert recovery.on("changes") == [
        (1, 100, SUSPECT, "drain_p2p", DRAIN_P2P),
        (1, 300, UNHEALTHY, "reset_gpu", GPU_RESET),  # drained: the driver names the next action
        (1, 500, UNHEALTHY, "reset_gpu", GPU_RESET),  # reset to none, then asked again
    ]


def test_a_gpu_lost_a_while_is_not_the_driver_asking_again(recovery: Findings) -> None:
    assert recovery.on("lost") == [(1, 100, UNHEALTHY, "reboot_node", NODE_REBOOT)]


def test_windows_that_tile_find_the_same_and_a_window_read_again_the_same(recovery: Findings) -> None:
    tiled = [e for start in range(0, 600, 30) for e in find(recovery.dsn, at(start), at(start + 30))]
    mine = sorted(((e.node_id, e.at, e.code) for e in tiled if e.kind == "recovery_action"), key=lambda k: (k[0], k[1]))
    whole = sorted(
        ((e.node_id, e.at, e.code) for e in recovery.found if e.kind == "recovery_action"), key=lambda k: (k[0], k[1])
    )
    assert mine == whole and len(whole) == 8


def test_an_application_xid_on_a_gpu_whose_driver_asks_for_a_reboot_is_the_reboot(recovery: Findings) -> None:
    assert recovery.on("xid_asked", "xid") == [(1, 100, UNHEALTHY, "reboot_node", 13)]
    [detail] = recovery.detail("xid_asked", "xid")
    assert detail.startswith("XID 13 (") and detail.endswith(" on GPU 1 (the driver asks for a node reboot)")


def test_the_catalogue_judges_an_xid_where_the_driver_asks_nothing_or_asked_too_long_ago(recovery: Findings) -> None:
    for node in ("none", "xid_before_asking", "xid_stale"):
        [(gpu, _, severity, action, code)] = recovery.on(node, "xid")
        assert (gpu, severity, action, code) == (1, IGNORE, "app_error", 13), node
        assert "driver" not in recovery.detail(node, "xid")[0]


@pytest.mark.parametrize(
    ("code", "severity", "action"),
    [
        (1, UNHEALTHY, "reset_gpu"),
        (2, UNHEALTHY, "reboot_node"),
        (3, SUSPECT, "drain_p2p"),
        (4, UNHEALTHY, "reset_gpu"),
        (5, SUSPECT, "check_imex_domain"),
        (6, UNHEALTHY, "reset_gpu"),
        (7, UNHEALTHY, "reboot_node"),
        (42, SUSPECT, "follow_recovery_action"),  # a driver newer than gpuscope
    ],
)
def test_each_action_nvml_names(code: int, severity: Severity, action: str) -> None:
    verdict = driver_verdict(code)
    assert (verdict.severity, verdict.action) == (severity, action)


def test_the_health_loop_takes_the_node_out_when_its_driver_asks_for_a_reboot(fleet: Fleet) -> None:
    """Through the loop (a dry run): the finding moves the node, and its reason says what the driver asks."""
    gpu = fleet.gpus["n2"][3]
    fleet.telemetry.conn.execute(
        "UPDATE gpu_sample SET recovery_action = CASE WHEN ts >= %s THEN 2 ELSE 0 END WHERE gpu_id = %s", (at(100), gpu)
    )
    fleet.run(fleet.dry_run(), 140)
    state, reason, _ = fleet.state("n2")
    assert state == "unhealthy" and "the driver asks for a node reboot (NVML recovery action 2) on GPU 3" in reason
    assert fleet.state("n1")[0] == "healthy"
