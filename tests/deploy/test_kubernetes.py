"""The Kubernetes manifests: parsed and checked against the shapes Kubernetes requires (selectors that
match their pods, Services that reach named ports, probes, non-root containers), their command lines
accepted by gpuscope's own argument parser, and rendered by `kubectl kustomize` where kubectl exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscope.cli import _parser

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}
KNOWN = {("v1", "Namespace"), ("v1", "Service"), ("apps/v1", "Deployment"), ("apps/v1", "DaemonSet"),
         ("apps/v1", "StatefulSet")}  # fmt: skip


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(KUBERNETES.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def workloads() -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in documents() if d["kind"] in WORKLOADS}


def test_every_object_has_a_known_kind_and_a_name() -> None:
    for doc in documents():
        assert (doc["apiVersion"], doc["kind"]) in KNOWN, doc.get("kind")
        assert doc["metadata"]["name"].startswith("gpuscope")


@pytest.mark.parametrize("name", sorted(workloads()))
def test_workloads_select_their_pods_and_run_hardened_probed_containers(name: str) -> None:
    spec = workloads()[name]["spec"]
    template = spec["template"]
    assert spec["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    for container in template["spec"]["containers"]:
        assert container["image"] and container["resources"]["requests"]
        ports = {p["name"] for p in container.get("ports", [])}
        for probe in ("readinessProbe", "livenessProbe"):
            check = container[probe]
            target = (check.get("httpGet") or check.get("tcpSocket") or {}).get("port")
            assert target is None or target in ports, f"{probe} names port {target!r}"
        if name != "gpuscope-timescaledb":  # the official image runs as it must
            security = container["securityContext"]
            assert security["runAsNonRoot"] and security["allowPrivilegeEscalation"] is False
            assert security["capabilities"]["drop"] == ["ALL"]


def test_services_reach_a_workload_and_its_named_ports() -> None:
    pods = {name: w["spec"]["template"] for name, w in workloads().items()}
    for service in (d for d in documents() if d["kind"] == "Service"):
        selector = service["spec"]["selector"]
        matching = [t for t in pods.values() if selector.items() <= t["metadata"]["labels"].items()]
        assert matching, f"Service {service['metadata']['name']} selects no pods"
        ports = {p["name"] for t in matching for c in t["spec"]["containers"] for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_the_commands_are_ones_gpuscope_accepts() -> None:
    parser = _parser()
    for workload in workloads().values():
        for container in workload["spec"]["template"]["spec"]["containers"]:
            if "args" in container:
                args = [a.replace("$(", "").replace(")", "") for a in container["args"]]
                parser.parse_args(args)  # SystemExit on an unknown flag or a missing value
    assert workloads()["gpuscope-collector"]["spec"]["replicas"] >= 2, "collectors are replicated"


def test_the_exporter_reads_the_host_without_writing_it() -> None:
    pod = workloads()["gpuscope-exporter"]["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["sys"]["readOnly"] and mounts["pod-resources"]["readOnly"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_kubectl_kustomize_renders_both_variants() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (the shape checks above still run)")
    for variant, objects in (("base", 7), ("timescaledb", 9)):
        result = subprocess.run([kubectl, "kustomize", str(KUBERNETES / variant)], capture_output=True, text=True,
                                timeout=60, check=False)  # fmt: skip
        assert result.returncode == 0, result.stderr
        rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
        assert len(rendered) == objects
        assert all(d["metadata"].get("namespace") == "gpuscope" for d in rendered if d["kind"] != "Namespace")
