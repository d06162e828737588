"""One GPU instead of its node, through the live loop against the Kubernetes stand-in serving DRA: a GPU
reset asked for by a finding on one GPU taints that device (a DeviceTaintRule) and leaves the node in
service; the episode counts one GPU out; after the quiet, checked window the taint goes. A finding the
ladder answers with a reboot, or a cluster without DRA, takes the node as before; an operator who deletes
the taint has resumed the GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.health.api_server import gpu_device, resource_slice
from tests.health.fleet import GPUS, Fleet

QUIET = {"quiet_s": 60}
FAKE_DCGMI = Path(__file__).parent / "fake_bin" / "dcgmi"


def publish_gpus(fleet: Fleet, node: str) -> None:
    devices = [gpu_device(f"gpu-{i}", f"GPU-{fleet.nodes[node]}-{i}", i) for i in range(GPUS)]
    with fleet.server.lock:
        fleet.server.slices.append(resource_slice(node, devices))


def episode(fleet: Fleet, node: str) -> dict[str, Any]:
    cur = fleet.telemetry.conn.execute(
        "SELECT scope, gpus_out, outcome, repair FROM health_episode WHERE node_id = %s ORDER BY episode_id DESC",
        [fleet.nodes[node]],
    )
    names = [d.name for d in cur.description or []]
    row = cur.fetchone()
    assert row is not None
    return dict(zip(names, row, strict=True))


def test_a_gpu_reset_takes_out_the_gpu_and_not_the_node(
    fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    publish_gpus(fleet, "n1")
    argv = tmp_path / "dcgmi-argv.json"
    monkeypatch.setenv("FAKE_ARGV_FILE", str(argv))
    loop = fleet.live(validation={"preset": "dcgm_diag", "dcgmi": str(FAKE_DCGMI)}, **QUIET)
    fleet.xid("n1", 2, 100, 48)  # double-bit ECC: reset the GPU
    fleet.run(loop, 140)
    assert fleet.state("n1")[0] == "drained" and not fleet.cordoned("n1"), "the node stays in service"
    [rule] = fleet.server.taint_rules.values()
    assert rule["spec"]["deviceSelector"]["device"] == "gpu-2" and rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert episode(fleet, "n1") == {"scope": "gpu", "gpus_out": 1, "outcome": "open", "repair": "reset_gpu"}
    fleet.run(loop, 210, 220)
    assert fleet.state("n1")[0] == "healthy" and not fleet.server.taint_rules, "validated, the taint removed"
    checked = json.loads(argv.read_text())
    assert checked[checked.index("-i") + 1] == "2", "the one GPU is checked: the others run jobs"
    assert episode(fleet, "n1")["outcome"] == "returned"


def test_a_reboot_takes_the_node_and_no_dra_takes_the_node(fleet: Fleet) -> None:
    publish_gpus(fleet, "n1")
    fleet.xid("n1", 2, 100, 79)  # fallen off the bus: reboot the node, so the node goes
    fleet.xid("n2", 1, 100, 48)  # n2 publishes no devices: the node goes
    fleet.run(fleet.live(**QUIET), 140)
    assert fleet.cordoned("n1") and fleet.cordoned("n2") and not fleet.server.taint_rules
    assert episode(fleet, "n1")["scope"] == "node" and episode(fleet, "n1")["gpus_out"] == GPUS


def test_an_operator_who_removes_the_taint_resumed_the_gpu(fleet: Fleet) -> None:
    publish_gpus(fleet, "n3")
    loop = fleet.live(quiet_s=600)
    fleet.xid("n3", 0, 100, 48)
    fleet.run(loop, 140)
    assert fleet.server.taint_rules
    with fleet.server.lock:
        fleet.server.taint_rules.clear()
    fleet.run(loop, 150)
    state, reason, _ = fleet.state("n3")
    assert state == "healthy" and reason == "device taint removed by an operator"
    assert episode(fleet, "n3")["outcome"] == "resumed_by_operator"


def test_a_gpu_the_scheduler_cannot_find_takes_the_node(fleet: Fleet) -> None:
    devices = [gpu_device(f"gpu-{i}", f"GPU-{fleet.nodes['n2']}-{i}", i) for i in (0, 1)]  # GPU 2 not published
    with fleet.server.lock:
        fleet.server.slices.append(resource_slice("n2", devices))
    fleet.xid("n2", 2, 100, 48)
    fleet.run(fleet.live(**QUIET), 140)
    assert fleet.state("n2")[0] == "drained" and fleet.cordoned("n2") and not fleet.server.taint_rules
    assert [(a, d.startswith("cordon")) for a, _, d in fleet.actions("n2")] == [("drain", False), ("drain", True)]
    assert episode(fleet, "n2")["scope"] == "node"


def test_a_check_that_needs_every_gpu_takes_the_node(fleet: Fleet) -> None:
    publish_gpus(fleet, "n4")
    nccl = {"preset": "nccl_all_reduce", "all_reduce_perf": "all_reduce_perf", "min_busbw_gbps": 1}
    fleet.xid("n4", 1, 100, 48)
    fleet.run(fleet.live(validation=nccl, quiet_s=600), 140)
    assert fleet.cordoned("n4") and not fleet.server.taint_rules
