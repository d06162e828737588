"""The Kubernetes adapter, through the official client, against a stand-in API server: a drain cordons,
taints and sets a condition that says why; a resume undoes exactly that and leaves others' taints; a node
cordoned by someone else is not gpuscope's to resume; RBAC refusals are outcomes that say what to grant."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpuscope.health.schedulers.base import REASON_PREFIX
from gpuscope.health.schedulers.kubernetes import CONDITION, REASON_ANNOTATION, TAINT_KEY, KubernetesScheduler
from tests.health.api_server import ApiServer, api_server, node

OTHER_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
def server() -> Iterator[ApiServer]:
    nodes = [node("gpu-01", taints=[OTHER_TAINT]), node("gpu-02"), node("gpu-03", unschedulable=True)]
    with api_server(nodes) as running:
        yield running


def scheduler(server: ApiServer) -> KubernetesScheduler:
    config = client.Configuration(host=server.url)
    return KubernetesScheduler(client.CoreV1Api(client.ApiClient(config)))


def condition(server: ApiServer, name: str) -> dict[str, Any]:
    return next(c for c in server.nodes[name]["status"]["conditions"] if c["type"] == CONDITION)


def test_a_drain_cordons_taints_and_says_why_and_a_resume_undoes_only_that(server: ApiServer) -> None:
    adapter = scheduler(server)
    reason = REASON_PREFIX + "XID 79 on GPU 3"
    drained = asyncio.run(adapter.drain("gpu-01", reason))
    assert drained.ok, drained.detail
    spec = server.nodes["gpu-01"]["spec"]
    assert spec["unschedulable"] is True
    assert {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"} in spec["taints"] and OTHER_TAINT in spec[
        "taints"
    ]
    assert server.nodes["gpu-01"]["metadata"]["annotations"][REASON_ANNOTATION] == reason
    assert condition(server, "gpu-01")["status"] == "False" and condition(server, "gpu-01")["message"] == reason
    assert [c["type"] for c in server.nodes["gpu-01"]["status"]["conditions"]] == ["Ready", CONDITION]
    seen = asyncio.run(adapter.nodes(["gpu-01", "gpu-02", "gpu-03", "nowhere"]))
    assert seen["gpu-01"].drained and seen["gpu-01"].ours and seen["gpu-01"].reason == reason
    assert not seen["gpu-02"].drained
    assert seen["gpu-03"].drained and not seen["gpu-03"].ours, "cordoned by someone else"
    assert "nowhere" not in seen

    resumed = asyncio.run(adapter.resume("gpu-01"))
    assert resumed.ok, resumed.detail
    spec = server.nodes["gpu-01"]["spec"]
    assert spec["unschedulable"] is False and spec["taints"] == [OTHER_TAINT], "the other taint stays"
    assert REASON_ANNOTATION not in server.nodes["gpu-01"]["metadata"]["annotations"]
    assert condition(server, "gpu-01")["status"] == "True"
    assert not asyncio.run(adapter.nodes(["gpu-01"]))["gpu-01"].drained


def test_refusals_and_unknown_nodes_are_outcomes_that_say_why(server: ApiServer) -> None:
    adapter = scheduler(server)
    missing = asyncio.run(adapter.drain("gpu-99", REASON_PREFIX + "x"))
    assert not missing.ok and "no such node" in missing.detail
    server.forbid_patches = True
    refused = asyncio.run(adapter.drain("gpu-02", REASON_PREFIX + "x"))
    assert not refused.ok and "collector-rbac.yaml" in refused.detail
    assert server.nodes["gpu-02"]["spec"].get("unschedulable") is None, "nothing half done"


def test_an_unreachable_api_server_is_an_error_the_loop_logs() -> None:
    config = client.Configuration(host="http://127.0.0.1:9")  # discard port: nothing listens
    config.retries = 0
    adapter = KubernetesScheduler(client.CoreV1Api(client.ApiClient(config)))
    with pytest.raises(RuntimeError, match="cannot list nodes"):
        asyncio.run(adapter.nodes(["gpu-01"]))
    assert not asyncio.run(adapter.resume("gpu-01")).ok
