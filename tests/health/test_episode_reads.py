"""Health episodes read back (health/episode_reads.py) from rows written here with SQL, as the health loop
would have left them, every figure checked by hand: durations and GPU-hours, what followed each episode
(a node that failed again on day 3; a GPU-scoped episode where another GPU failed, which is no repeat for
its GPU; an episode back 2 days ago, too early to tell), an episode's evidence and actions, and the repair
outcomes per cause."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.health.episode_reads import RepairOutcome, episode, episodes, repair_outcomes
from tests.health.episode_rows import add_episode
from tests.health.helpers import Telemetry

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def ago(days: float = 0, hours: float = 0, minutes: float = 0) -> datetime:
    return NOW - timedelta(days=days, hours=hours, minutes=minutes)


NODE_OF = {"E1": "a", "E2": "a", "E3": "a", "E4": "g", "E5": "g", "E6": "b", "E7": "n9", "K1": "k", "K2": "k",
           "D1": "dry", "D2": "dry"}  # fmt: skip


@dataclass(frozen=True)
class History:
    conn: psycopg.Connection[Any]
    ids: dict[str, int]  # episode name -> id
    nodes: dict[str, int]  # node name -> id
    gpus: dict[str, list[int]]  # node name -> its GPUs' ids

    def ids_name(self, episode_id: int) -> str:
        return next(name for name, found in self.ids.items() if found == episode_id)

    def node_of(self, episode_name: str) -> int:
        return self.nodes[NODE_OF[episode_name]]


@pytest.fixture
def history(dsn: str) -> Iterator[History]:
    """Cluster c: node a (XID 79 at day 40, failed again 3 days after its return; then a suspect finding
    that cleared), node g (a GPU-scoped ECC error on GPU 0, then one on GPU 1), node b (back 2 days ago),
    node k (back 59 days ago, held for inspection 18 days later), node dry (a dry run: never taken out,
    its repair only chosen, twice within 3 days). Cluster d: node n9, out 6 h, still open."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        telemetry = Telemetry(conn)
        nodes = {name: telemetry.node(name) for name in ("a", "g", "b", "k", "dry")}
        nodes["n9"] = telemetry._id("INSERT INTO node (cluster, name, rack) VALUES ('d', 'n9', 'r') RETURNING node_id")
        gpus = {name: telemetry.gpus(node_id, 8) for name, node_id in nodes.items()}
        reboot = {"repair": "reboot_node", "rung": 1, "gpus_out": 8, "gpu_id": gpus["a"][3]}
        ids = {
            "E1": add_episode(conn, nodes["a"], "xid:79", ago(40), ago(40) + timedelta(minutes=10), ago(39.5),
                              "returned", **reboot, repair_result="rebooted", validation="passed"),
            "E2": add_episode(conn, nodes["a"], "xid:79", ago(36.5), ago(36.5), ago(35.5), "resumed_by_operator",
                              **reboot),
            "E3": add_episode(conn, nodes["a"], "nvlink_flap", ago(20), None, ago(19.9), "cleared"),
            "E4": add_episode(conn, nodes["g"], "ecc_uncorrectable", ago(10), ago(10), ago(9), "returned",
                              scope="gpu", gpu_id=gpus["g"][0], gpus_out=1, repair="reset_gpu", rung=0),
            "E5": add_episode(conn, nodes["g"], "ecc_uncorrectable", ago(6), ago(6), ago(5), "returned",
                              scope="gpu", gpu_id=gpus["g"][1], gpus_out=1, repair="reset_gpu", rung=0,
                              validation="failed: dcgmi diag level 2", failed_test="memory bandwidth"),
            "E6": add_episode(conn, nodes["b"], "xid:48", ago(2.5), ago(2.5), ago(2), "returned",
                              gpu_id=gpus["b"][5], gpus_out=8, repair="reset_gpu", rung=0),
            "E7": add_episode(conn, nodes["n9"], "gpu_lost", ago(hours=12), ago(hours=6), None, "open", gpus_out=8),
            "K1": add_episode(conn, nodes["k"], "xid:48", ago(60), ago(60), ago(59), "returned", gpus_out=8,
                              repair="reset_gpu", rung=0),
            "K2": add_episode(conn, nodes["k"], "xid:48", ago(41), None, None, "held", repair="inspect", rung=3),
            "D1": add_episode(conn, nodes["dry"], "xid:79", ago(25), None, ago(24.9), "cleared", dry_run=True,
                              repair="reboot_node", rung=1),
            "D2": add_episode(conn, nodes["dry"], "xid:79", ago(22), None, ago(21.9), "cleared", dry_run=True,
                              repair="reboot_node", rung=1),
        }  # fmt: skip
        yield History(conn, ids, nodes, gpus)


def test_durations_gpu_hours_and_what_followed(history: History) -> None:
    found = {history.ids_name(e.episode_id): e for e in episodes(history.conn, TimeRange(ago(70), NOW), now=NOW)}
    assert list(found) == ["E7", "E6", "E5", "E4", "E3", "D2", "D1", "E2", "E1", "K2", "K1"], "newest first"
    e1 = found["E1"]
    uuid = f"GPU-{history.node_of('E1')}-3"
    assert (e1.cluster, e1.node, e1.gpu, e1.gpu_uuid, e1.scope) == ("c", "a", 3, uuid, "node")
    assert e1.out_s == 12 * 3600 - 600 and e1.gpu_hours == pytest.approx(8 * (12 * 3600 - 600) / 3600)
    assert (e1.repair, e1.rung, e1.repair_result, e1.validation) == ("reboot_node", 1, "rebooted", "passed")
    # Node a failed again 3 days after E1's return (E2, taken out): within 7 and within 30 days.
    assert (e1.failed_again_7d, e1.failed_again_30d, e1.next_episode_id) == (True, True, history.ids["E2"])
    # E2 back 35.5 days ago; only a suspect finding that cleared (never taken out) followed: it held.
    e2 = found["E2"]
    assert (e2.failed_again_7d, e2.failed_again_30d, e2.next_episode_id) == (False, False, None)
    e3 = found["E3"]
    assert (e3.out_s, e3.gpu_hours, e3.gpu, e3.outcome) == (None, 0.0, None, "cleared")
    # GPU-scoped: GPU 1 failing 3 days after GPU 0's return is no repeat for GPU 0. 7 days have passed
    # since E4's return, 30 have not: held a week, not known for a month.
    e4 = found["E4"]
    assert (e4.scope, e4.gpu, e4.gpus_out, e4.out_s, e4.gpu_hours) == ("gpu", 0, 1, 86400, 24)
    assert (e4.failed_again_7d, e4.failed_again_30d, e4.next_episode_id) == (False, None, None)
    e5 = found["E5"]
    assert (e5.failed_again_7d, e5.failed_again_30d) == (None, None), "back 5 days ago: too early for 7 d"
    assert (e5.validation, e5.failed_test) == ("failed: dcgmi diag level 2", "memory bandwidth")
    e6 = found["E6"]
    assert (e6.failed_again_7d, e6.failed_again_30d, e6.out_s, e6.gpu_hours) == (None, None, 43200, 96)
    # Still open: out 6 h so far (8 GPUs: 48 GPU-hours), nothing followed yet.
    e7 = found["E7"]
    assert (e7.cluster, e7.outcome, e7.back_at, e7.out_s, e7.gpu_hours) == ("d", "open", None, 6 * 3600, 48)
    assert (e7.failed_again_7d, e7.failed_again_30d, e7.next_episode_id) == (None, None, None)
    # K1: held for inspection 18 days after its return (never taken out, but held): failed within 30 d.
    k1 = found["K1"]
    assert (k1.failed_again_7d, k1.failed_again_30d, k1.next_episode_id) == (False, True, history.ids["K2"])
    # A dry run takes nothing out; a repair chosen is the failure the ladder counts, so it counts here too.
    d1, d2 = found["D1"], found["D2"]
    assert (d1.out_s, d1.gpu_hours, d1.dry_run) == (None, 0.0, True)
    assert (d1.failed_again_7d, d1.failed_again_30d, d1.next_episode_id) == (True, True, history.ids["D2"])
    assert (d2.failed_again_7d, d2.failed_again_30d, d2.next_episode_id) == (False, None, None)


def test_filters_and_the_overlap_with_the_span(history: History) -> None:
    def names(**given: Any) -> list[str]:
        span = given.pop("span", TimeRange(ago(70), NOW))
        return [history.ids_name(e.episode_id) for e in episodes(history.conn, span, now=NOW, **given)]

    assert names(node="a") == ["E3", "E2", "E1"]
    assert names(cluster="d") == ["E7"]
    assert names(gpu_uuid=f"GPU-{history.node_of('E5')}-1") == ["E5"]
    assert names(node="nowhere") == []
    # Started before the span's end and back after its start (or still open): E2, and K2 (held, open).
    assert names(span=TimeRange(ago(36), ago(35))) == ["E2", "K2"]
    assert names(span=TimeRange(ago(3), ago(2.2))) == ["E6", "K2"]
    assert names(limit=2) == ["E7", "E6"]


def test_one_episode_with_its_evidence_and_actions(history: History) -> None:
    conn, node = history.conn, history.node_of("E1")
    evidence = "INSERT INTO health_evidence (at, node_id, gpu_id, kind, code, severity, detail) VALUES (%s, %s, %s, 'xid', %s, 'unhealthy', %s)"  # noqa: E501
    conn.execute(evidence, [ago(41), node, history.gpus["a"][3], 48, "before it: not this episode's"])
    conn.execute(evidence, [ago(40), node, history.gpus["a"][3], 79, "XID 79 on GPU 3"])
    conn.execute(evidence, [ago(39.8), node, None, 79, "XID 79 again"])
    conn.execute(evidence, [ago(39), node, history.gpus["a"][3], 13, "after its return: not this episode's"])
    action = "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail) VALUES (%s, %s, %s, 'slurm', false, true, %s)"  # noqa: E501
    conn.execute(action, [ago(40) + timedelta(minutes=10), node, "drain", "scontrol drain"])
    conn.execute(action, [ago(39.5), node, "resume", "scontrol resume"])  # at back_at: still this episode's
    conn.execute(action, [ago(39.7), history.node_of("E4"), "drain", "another node's"])
    record = episode(conn, history.ids["E1"], now=NOW)
    assert record is not None and record.episode.episode_id == history.ids["E1"]
    assert [(e.detail, e.gpu, e.code) for e in record.evidence] == [("XID 79 again", None, 79),
                                                                     ("XID 79 on GPU 3", 3, 79)]  # fmt: skip
    assert record.evidence_count == 2
    assert [(a.action, a.node, a.detail) for a in record.actions] == [
        ("resume", "a", "scontrol resume"),
        ("drain", "a", "scontrol drain"),
    ]
    # An open episode's span runs to now.
    conn.execute(evidence, [ago(hours=1), history.node_of("E7"), None, 79, "lost again"])
    conn.execute(evidence, [NOW + timedelta(hours=1), history.node_of("E7"), None, 79, "after now"])
    open_one = episode(conn, history.ids["E7"], now=NOW)
    assert open_one is not None and [e.detail for e in open_one.evidence] == ["lost again"]
    assert open_one.actions == [] and open_one.episode.out_s == 6 * 3600
    assert episode(conn, 10**9) is None


def test_repair_outcomes_per_cause_and_repair(history: History) -> None:
    rows = repair_outcomes(history.conn, TimeRange(ago(70), NOW), now=NOW)
    assert rows == [
        # E1 failed again on day 3, E2 (resumed by an operator) held both; the dry run's D1 failed again on
        # day 3, D2 held a week (30 days not yet passed). The cleared suspect finding (no repair chosen),
        # the open and the held episodes never ended as failures: not counted.
        RepairOutcome("xid:79", "reboot_node", 4, 2, 2, 0, 1, 2, 1),
        # E4 held a week (30 d not yet passed); E5 back 5 days ago: too early for both.
        RepairOutcome("ecc_uncorrectable", "reset_gpu", 2, 1, 0, 1, 0, 0, 2),
        # K1 held a week, failed within 30 days (held for inspection on day 18); E6 back 2 days ago.
        RepairOutcome("xid:48", "reset_gpu", 2, 1, 0, 1, 0, 1, 1),
    ]
    assert [(r.held_rate_7d, r.held_rate_30d) for r in rows] == [(0.5, 1 / 3), (1.0, None), (1.0, 0.0)]
    recent = repair_outcomes(history.conn, TimeRange(ago(8), NOW), now=NOW)
    assert [(r.cause, r.returned, r.too_early_7d) for r in recent] == [("ecc_uncorrectable", 1, 1), ("xid:48", 1, 1)]
    assert repair_outcomes(history.conn, TimeRange(ago(70), NOW), cluster="d", now=NOW) == []
