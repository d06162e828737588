"""Fleet health end to end with a real Slurm: the exporter's NVML (the fake library) raises XID 79 on GPU 3,
the exporter's sampler and events reach a real collector, the health loop drains the node in the real
slurmctld with gpuscope's reason, validates it once quiet (the site's command, run for real) and resumes
it. With the policy's limit reached it drains nothing and says why, and a node an operator resumed by
hand is not drained again for the same evidence."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import yaml

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.exporter.events import EventTracker
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from gpuscope.exporter.wire import Origin
from gpuscope.health.loop import LOCK_KEY
from tests.collector.helpers import push_binary
from tests.conftest import new_database
from tests.processes import RunningCollector, running_collector
from tests.slurm.cluster import SlurmCluster
from tests.slurm.conftest import ClusterFactory
from tests.waiting import eventually

PUSH_EVERY_S = 0.5
MORE_CYCLES = timedelta(seconds=1.5)  # a few more of the loop's cycles (every_s 0.5) over the same evidence


class Exporter:
    """The exporter's parts on the Slurm node: fake NVML with XID events, the sampler, events, pushes."""

    def __init__(self, node: str, collector: RunningCollector) -> None:
        self.gpus = h100_node(4)
        self.nvml = make_fake_pynvml(self.gpus)
        self.source = NvmlSource(self.nvml)
        self.sampler = Sampler(self.source, interval=PUSH_EVERY_S)
        self.events = EventTracker()
        self.origin = Origin("c", "r1", node, "nvml", str(uuid.uuid4()))
        self.collector = collector
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._push, daemon=True)
        self.thread.start()

    def _push(self) -> None:
        seq = 0
        while not self.stop.wait(PUSH_EVERY_S):
            snapshot = self.sampler.sample_once(time.time())
            seq += 1
            push_binary(self.collector, self.origin, seq, [snapshot], self.events.observe(snapshot))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
        self.source.close()


def policy(cluster: SlurmCluster, folder: Path, **changes: Any) -> Path:
    settings = {
        "scheduler": "slurm", "dry_run": False, "scontrol": shutil.which("scontrol"),
        "max_drained": 1, "max_drained_share": 1.0, "every_s": 0.5, "lag_s": 1, "quiet_s": 4,
        "validate_command": ["sh", "-c", f"test {{node}} = {cluster.node} && echo all GPUs pass"],
        **changes,
    }  # fmt: skip
    path = folder / "health.yaml"
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.fixture
def stack(
    slurm_cluster_factory: ClusterFactory, postgres: EmbeddedPostgres, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Any]:
    cluster = slurm_cluster_factory()
    monkeypatch.setenv("SLURM_CONF", cluster.env["SLURM_CONF"])  # the collector's scontrol finds this cluster

    def start(**changes: Any) -> tuple[RunningCollector, Exporter]:
        collector = stack_collector.enter_context(
            running_collector(new_database(postgres), health=True, health_policy=policy(cluster, tmp_path, **changes))
        )
        exporter = Exporter(cluster.node, collector)
        stack_exporters.append(exporter)
        return collector, exporter

    stack_exporters: list[Exporter] = []
    with contextlib.ExitStack() as stack_collector:
        yield cluster, start
        for exporter in stack_exporters:
            exporter.close()


def health(collector: RunningCollector, node: str) -> dict[str, Any]:
    """The node as the health API has it ({} until its exporter's first push)."""
    nodes = httpx.get(f"{collector.url}/api/v1/health/nodes", timeout=10).json()
    return next((n for n in nodes if n["node"] == node), {})


def wait(check: Any, what: str, timeout: float = 45.0) -> Any:
    return eventually(check, what=what, timeout=timeout, interval=0.3)


def loop_goes_on(collector: RunningCollector, span: timedelta = MORE_CYCLES) -> None:
    """Wait until the health loop has gone on cycling for `span` from now: the window in which something
    must NOT happen is the loop's work, not the clock's (a loaded machine cycles less often)."""
    with psycopg.connect(collector.dsn) as conn:
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    until: datetime = row[0] + span
    wait(lambda: (last := loop_active_at(collector)) is not None and last >= until, f"{span} more of the health loop")


def loop_active_at(collector: RunningCollector) -> datetime | None:
    """When the health loop's connection (the one holding its leader lock) last began or ended a query."""
    with psycopg.connect(collector.dsn) as conn:
        row = conn.execute(
            "SELECT a.state_change FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.granted AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
            (LOCK_KEY,),
        ).fetchone()
    return row[0] if row else None


def test_an_xid_79_drains_the_node_in_slurm_and_it_returns_after_validation(stack: Any) -> None:
    cluster, start = stack
    collector, exporter = start()
    job = cluster.sbatch("--gres=gpu:2", "--output=/dev/null", "--wrap", "sleep 300")
    cluster.wait_for_job(job, "RUNNING")
    wait(lambda: health(collector, cluster.node), "the node to be known")
    exporter.nvml.raise_xid(exporter.gpus[3], 79)

    info = wait(lambda: (i := cluster.node_info()) and "DRAIN" in i["State"] and i, "Slurm to drain the node")
    assert info["Reason"].startswith("gpuscope: XID 79 (GPU has fallen off the bus) on GPU 3"), info["Reason"]
    assert cluster.job_info(job)["JobState"] == "RUNNING", "a drain lets running jobs finish"
    drained = health(collector, cluster.node)
    assert drained["state"] == "drained"
    assert [g["state"] for g in drained["gpus"]] == ["healthy", "healthy", "healthy", "unhealthy"]

    # Quiet for quiet_s, every GPU reporting up: validated by the site's command, then resumed in Slurm.
    wait(lambda: health(collector, cluster.node).get("state") == "healthy", "the node's return", timeout=60)
    wait(lambda: "DRAIN" not in cluster.node_info()["State"], "Slurm to resume the node")
    span = {"minutes": 10}
    moves = httpx.get(f"{collector.url}/api/v1/health/transitions", params=span, timeout=10).json()
    assert [(m["from"], m["to"]) for m in reversed(moves)] == [
        ("healthy", "unhealthy"), ("unhealthy", "drained"), ("drained", "validating"), ("validating", "healthy"),
    ]  # fmt: skip
    actions = httpx.get(f"{collector.url}/api/v1/health/actions", params=span, timeout=10).json()
    assert [(a["action"], a["ok"], a["dry_run"]) for a in reversed(actions)] == [
        ("drain", True, False), ("validate", True, False), ("resume", True, False),
    ]  # fmt: skip
    assert "all GPUs pass" in actions[1]["detail"]


def test_with_the_limit_reached_nothing_is_drained_and_the_node_says_why(stack: Any) -> None:
    cluster, start = stack
    collector, exporter = start(max_drained=0)
    wait(lambda: health(collector, cluster.node), "the node to be known")
    exporter.nvml.raise_xid(exporter.gpus[1], 79)
    sick = wait(lambda: (n := health(collector, cluster.node)).get("state") == "unhealthy" and n, "the verdict")
    assert sick["reason"].startswith("drain refused: 0 node(s) already out of service by gpuscope, the policy allows 0")
    loop_goes_on(collector)  # a few more cycles: still nothing
    assert "DRAIN" not in cluster.node_info()["State"]
    actions = httpx.get(f"{collector.url}/api/v1/health/actions", params={"minutes": 10}, timeout=10).json()
    assert [a["action"] for a in actions] == ["refused"]


def test_a_node_resumed_by_an_operator_stays_in_service(stack: Any) -> None:
    cluster, start = stack
    collector, exporter = start(quiet_s=600)
    wait(lambda: health(collector, cluster.node), "the node to be known")
    exporter.nvml.raise_xid(exporter.gpus[0], 79)
    wait(lambda: "DRAIN" in cluster.node_info()["State"], "Slurm to drain the node")
    cluster.scontrol("update", f"nodename={cluster.node}", "state=resume")
    back = wait(lambda: (n := health(collector, cluster.node)).get("state") == "healthy" and n, "gpuscope to see it")
    moves = httpx.get(f"{collector.url}/api/v1/health/transitions", params={"minutes": 10}, timeout=10).json()
    assert (moves[0]["to"], moves[0]["actor"]) == ("healthy", "human") and "by an operator" in moves[0]["reason"]
    loop_goes_on(collector)  # more cycles over the same evidence
    assert "DRAIN" not in cluster.node_info()["State"] and back["state"] == "healthy"


FAKE_DCGMI = Path(__file__).parents[1] / "health" / "fake_bin" / "dcgmi"


def test_a_node_failing_twice_climbs_the_ladder_with_its_episodes_recorded(stack: Any, tmp_path: Path) -> None:
    """Two failures of one cause on one node in a real Slurm: the first gets the ladder's first step (a GPU
    reset, the site's command), the second the next (a node reboot); each is drained in slurmctld,
    checked by the dcgmi preset (the fake binary prints DCGM's JSON), resumed, and kept as an episode
    whose record says what followed it."""
    cluster, start = stack
    log = tmp_path / "repairs.log"
    repairs = {step: ["sh", "-c", f'echo "{step} $0 $1" >> {log}', "{node}", "{gpu}"]
               for step in ("reset_gpu", "reboot_node")}  # fmt: skip
    collector, exporter = start(
        repair_commands=repairs, validate_command=[], validation={"preset": "dcgm_diag", "dcgmi": str(FAKE_DCGMI)}
    )
    wait(lambda: health(collector, cluster.node), "the node to be known")

    def fail_and_return(times: int) -> list[dict[str, Any]]:
        exporter.nvml.raise_xid(exporter.gpus[2], 48)
        wait(lambda: "DRAIN" in cluster.node_info()["State"], f"Slurm to drain the node ({times})")
        wait(lambda: health(collector, cluster.node).get("state") == "healthy", f"its return ({times})", timeout=60)
        wait(lambda: "DRAIN" not in cluster.node_info()["State"], f"Slurm to resume it ({times})")
        found = httpx.get(f"{collector.url}/api/v1/health/episodes", params={"minutes": 10}, timeout=10).json()
        assert len(found) == times, found
        return found

    fail_and_return(1)
    newest, first = fail_and_return(2)
    assert [(e["cause"], e["rung"], e["repair"], e["outcome"]) for e in (first, newest)] == [
        ("xid:48", 0, "reset_gpu", "returned"),
        ("xid:48", 1, "reboot_node", "returned"),
    ]
    assert log.read_text().splitlines() == [f"reset_gpu {cluster.node} 2", f"reboot_node {cluster.node} 2"]
    assert first["failed_again_7d"] is True and first["next_episode_id"] == newest["episode_id"]
    assert "passed" in newest["validation"] and newest["gpus_out"] == 4
    reasons = [r["repair_reason"] for r in (first, newest)]
    assert reasons[1].startswith("2nd failure of xid:48 within 7 d"), reasons
