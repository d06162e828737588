"""Taking one GPU out on Kubernetes with DRA, through the official client against a stand-in API server:
the adapter sees whether the cluster serves DeviceTaintRules and the node publishes its GPUs, taints exactly
the named GPU's device (by uuid, else by index) with a rule it can find again, does it once however often
asked, removes only its own rule, and words every refusal so that an operator knows what to do."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from gpuscope.health.schedulers import kubernetes as node_adapter
from gpuscope.health.schedulers.base import REASON_PREFIX
from gpuscope.health.schedulers.kubernetes import KubernetesScheduler
from gpuscope.health.schedulers.kubernetes_dra import REASON_ANNOTATION, TAINT_KEY, rule_name
from tests.health.api_server import ApiServer, api_server, gpu_device, node, resource_slice

UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(4)]
REASON = REASON_PREFIX + "XID 79 (fallen off the bus) on GPU 2"


def gpu_slices(basic: bool = False) -> list[dict[str, Any]]:
    gpus = [gpu_device(f"gpu-{i}", UUIDS[i], index=i, basic=basic) for i in range(4)]
    nic = {"name": "nic-0", "attributes": {"type": {"string": "gpu"}}}  # another driver's device, even so named
    return [resource_slice("gpu-01", gpus), resource_slice("gpu-01", [nic], driver="nic.example.com"),
            resource_slice("gpu-02", [], driver="nic.example.com")]  # fmt: skip


@pytest.fixture
def server() -> Iterator[ApiServer]:
    with api_server([node("gpu-01"), node("gpu-02")], gpu_slices()) as running:
        yield running


def scheduler(server: ApiServer) -> KubernetesScheduler:
    config = client.Configuration(host=server.url)
    return KubernetesScheduler(client.CoreV1Api(client.ApiClient(config)))


def writes(server: ApiServer) -> list[tuple[str, str]]:
    return [(method, path) for method, path, _ in server.requests if method != "GET"]


def test_gpus_are_taken_out_one_by_one_only_where_the_cluster_and_the_node_allow_it(
    server: ApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    adapter = scheduler(server)
    assert asyncio.run(adapter.gpu_drain_supported("gpu-01"))
    assert not asyncio.run(adapter.gpu_drain_supported("gpu-02")), "no GPU among its DRA devices"
    slice_lists = [path for method, path, _ in server.requests if "/resourceslices" in path]
    assert slice_lists == [
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dgpu-01",
        "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName%3Dgpu-02",
    ]
    asked = len(server.requests)
    assert asyncio.run(adapter.gpu_drain_supported("gpu-01"))
    assert len(server.requests) == asked, "the answer is kept a while, not asked again each pass"

    server.dra_versions = {}  # a cluster without DRA: resource.k8s.io answers 404
    plain = scheduler(server)
    with caplog.at_level(logging.INFO, logger="gpuscope.health.schedulers.kubernetes_dra"):
        assert not asyncio.run(plain.gpu_drain_supported("gpu-01"))
        assert not asyncio.run(plain.gpu_drain_supported("gpu-02"))
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "serves no resource.k8s.io" in said[0], "said once, not once a node"
    assert not any(method != "GET" for method, _, _ in server.requests)


def test_a_gpu_named_by_uuid_gets_exactly_one_rule_on_its_device_once_and_a_resume_deletes_it(
    server: ApiServer,
) -> None:
    adapter = scheduler(server)
    drained = asyncio.run(adapter.drain_gpu("gpu-01", UUIDS[2], None, REASON))
    assert drained.ok, drained.detail
    assert list(server.taint_rules) == ["gpuscope-gpu-01-gpu-2"]
    rule = server.taint_rules["gpuscope-gpu-01-gpu-2"]
    assert rule["apiVersion"] == "resource.k8s.io/v1" and rule["kind"] == "DeviceTaintRule"
    assert rule["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "gpu-01", "device": "gpu-2"}
    assert {k: rule["spec"]["taint"][k] for k in ("key", "value", "effect")} == {
        "key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}  # fmt: skip
    assert rule["metadata"]["annotations"][REASON_ANNOTATION] == REASON
    assert rule["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuscope"}
    assert "gpu-2" in drained.detail and "gpuscope-gpu-01-gpu-2" in drained.detail
    assert server.nodes["gpu-01"]["spec"] == {}, "the node stays in service: not cordoned, not tainted"

    again = asyncio.run(adapter.drain_gpu("gpu-01", UUIDS[2], None, REASON))
    assert again.ok and "already in place" in again.detail, again.detail
    assert len(server.taint_rules) == 1
    seen = asyncio.run(adapter.gpu_drains("gpu-01"))
    assert [(d.rule, d.device, d.gpu_uuid, d.gpu_index, d.reason) for d in seen] == [
        ("gpuscope-gpu-01-gpu-2", "gpu-2", UUIDS[2], 2, REASON)]  # fmt: skip
    assert asyncio.run(adapter.gpu_drains("gpu-02")) == []

    assert asyncio.run(adapter.drain_gpu("gpu-01", UUIDS[0], None, REASON)).ok
    resumed = asyncio.run(adapter.resume_gpu("gpu-01", UUIDS[2], None))
    assert resumed.ok and "deleted DeviceTaintRule gpuscope-gpu-01-gpu-2" in resumed.detail, resumed.detail
    assert list(server.taint_rules) == ["gpuscope-gpu-01-gpu-0"], "the other GPU's rule stays"
    twice = asyncio.run(adapter.resume_gpu("gpu-01", UUIDS[2], None))
    assert twice.ok and "no DeviceTaintRule" in twice.detail


def test_a_gpu_named_by_index_is_found_by_its_index_attribute_on_an_older_cluster() -> None:
    # Kubernetes 1.33: ResourceSlices in v1beta1's shape (`basic`), DeviceTaintRules in v1alpha3
    with api_server([node("gpu-01")], gpu_slices(basic=True)) as server:
        server.dra_versions = {"resourceslices": "v1beta1", "devicetaintrules": "v1alpha3"}
        adapter = scheduler(server)
        assert asyncio.run(adapter.gpu_drain_supported("gpu-01"))
        drained = asyncio.run(adapter.drain_gpu("gpu-01", None, 3, REASON))
        assert drained.ok, drained.detail
        assert writes(server) == [("POST", "/apis/resource.k8s.io/v1alpha3/devicetaintrules")]
        rule = server.taint_rules["gpuscope-gpu-01-gpu-3"]
        assert rule["apiVersion"] == "resource.k8s.io/v1alpha3"
        assert rule["spec"]["deviceSelector"]["device"] == "gpu-3"
        resumed = asyncio.run(adapter.resume_gpu("gpu-01", UUIDS[3], None))  # the uuid it was published with
        assert resumed.ok and server.taint_rules == {}, resumed.detail


def test_a_resume_finds_its_rule_after_the_device_left_the_resource_slices(server: ApiServer) -> None:
    adapter = scheduler(server)
    assert asyncio.run(adapter.drain_gpu("gpu-01", None, 1, REASON)).ok
    server.slices = []  # the driver no longer publishes the GPU that fell off the bus
    resumed = asyncio.run(adapter.resume_gpu("gpu-01", None, 1))
    assert resumed.ok and server.taint_rules == {}, resumed.detail


def test_an_unknown_gpu_a_foreign_rule_and_a_refusal_are_failing_outcomes_that_say_why(server: ApiServer) -> None:
    adapter = scheduler(server)
    unknown = asyncio.run(adapter.drain_gpu("gpu-01", "GPU-99999999-0000-0000-0000-000000000000", None, REASON))
    assert not unknown.ok and "no GPU GPU-99999999-0000-0000-0000-000000000000" in unknown.detail
    assert "gpu-0 (" + UUIDS[0] + ")" in unknown.detail, "it lists what the node publishes"
    assert not asyncio.run(adapter.drain_gpu("gpu-01", None, 7, REASON)).ok
    assert not asyncio.run(adapter.drain_gpu("gpu-01", None, None, REASON)).ok
    assert server.taint_rules == {}

    server.taint_rules["gpuscope-gpu-01-gpu-0"] = {"metadata": {"name": "gpuscope-gpu-01-gpu-0"}, "spec": {}}
    foreign = asyncio.run(adapter.drain_gpu("gpu-01", UUIDS[0], None, REASON))
    assert not foreign.ok and "gpuscope did not make" in foreign.detail
    assert asyncio.run(adapter.resume_gpu("gpu-01", UUIDS[0], None)).ok
    assert "gpuscope-gpu-01-gpu-0" in server.taint_rules, "a rule that is not gpuscope's is never deleted"

    server.forbidden = {"devicetaintrules"}
    refused = asyncio.run(adapter.drain_gpu("gpu-01", UUIDS[1], None, REASON))
    assert not refused.ok and "forbidden" in refused.detail and "collector-rbac.yaml" in refused.detail
    assert "gpuscope-gpu-01-gpu-1" not in server.taint_rules
    assert not asyncio.run(adapter.resume_gpu("gpu-01", UUIDS[1], None)).ok
    with pytest.raises(RuntimeError, match=r"collector-rbac\.yaml"):
        asyncio.run(adapter.gpu_drains("gpu-01"))

    server.forbidden = {"resourceslices"}
    assert not asyncio.run(scheduler(server).gpu_drain_supported("gpu-01")), "cannot see the GPUs: drain the node"

    server.dra_versions = {}
    unserved = asyncio.run(scheduler(server).drain_gpu("gpu-01", UUIDS[1], None, REASON))
    assert not unserved.ok and "DRADeviceTaints" in unserved.detail


def test_the_dry_run_says_what_would_be_done() -> None:
    adapter = KubernetesScheduler()
    drain = adapter.gpu_command("drain", "n1", UUIDS[3], 3, REASON)
    assert drain == f"taint device of GPU {UUIDS[3]} of node n1 (DRA) with {TAINT_KEY}=true:NoSchedule ({REASON})"
    assert (TAINT_KEY, REASON_ANNOTATION) == (node_adapter.TAINT_KEY, node_adapter.REASON_ANNOTATION), "one toleration"
    resume = adapter.gpu_command("resume", "n1", None, 3)
    assert resume == f"remove taint {TAINT_KEY} from device of GPU 3 of node n1 (DRA)"


DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@pytest.mark.parametrize("node_name", ["gpu-01", "rack7.gpu-01.example.com", "GPU_01", "n" * 250])
def test_rule_names_are_valid_object_names_and_differ_per_device(node_name: str) -> None:
    names = {rule_name(node_name, device) for device in ("gpu-0", "gpu-1", "gpu-0-mig-9-4-2")}
    assert len(names) == 3
    for name in names:
        assert len(name) <= 253 and DNS_SUBDOMAIN.fullmatch(name), name
    assert rule_name("gpu-01", "gpu-3") == "gpuscope-gpu-01-gpu-3"
