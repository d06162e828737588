"""The Kubernetes manifests: parsed and checked against the shapes Kubernetes requires (selectors that
match their pods, Services that reach named ports, probes, non-root containers), their command lines
accepted by gpuscope's own argument parser, RBAC that grants the exporter no more than reading pods, and
rendered by `kubectl kustomize` where kubectl exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
import yaml

from gpuscope.cli import _parser

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
WORKLOADS = {"Deployment", "DaemonSet", "StatefulSet"}
RBAC = "rbac.authorization.k8s.io/v1"
KNOWN = {("v1", "Namespace"), ("v1", "Service"), ("v1", "ServiceAccount"), ("apps/v1", "Deployment"),
         ("apps/v1", "DaemonSet"), ("apps/v1", "StatefulSet"), (RBAC, "ClusterRole"),
         (RBAC, "ClusterRoleBinding"), ("acid.zalan.do/v1", "postgresql")}  # fmt: skip
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}  # kustomize gives them no namespace
NAMESPACE = "gpuscope"  # kustomization.yaml's namespace: where the exporter's ServiceAccount lives
# The default of the exporter's --pod-resources-socket (gpuscope/cli.py), written out here so that a change
# to it shows up as a failing test: the DaemonSet mounts this socket's directory from the host.
POD_RESOURCES_SOCKET = PurePosixPath("/var/lib/kubelet/pod-resources/kubelet.sock")


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
            # the exporter runs as root to reach the kubelet's socket (a root-only directory); others never
            assert security["runAsNonRoot"] or name == "gpuscope-exporter"
            assert security["allowPrivilegeEscalation"] is False and security["readOnlyRootFilesystem"] is True
            assert security["capabilities"]["drop"] == ["ALL"] and not security["capabilities"].get("add")


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


def test_the_exporter_mounts_the_kubelets_pod_resources_socket_where_it_looks_for_it() -> None:
    pod = workloads()["gpuscope-exporter"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == str(POD_RESOURCES_SOCKET.parent)
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    assert mount["readOnly"] is True
    args = container["args"]
    assert args[args.index("--jobs") + 1] == "k8s"
    socket = POD_RESOURCES_SOCKET  # where the exporter looks unless its args say otherwise
    if "--pod-resources-socket" in args:
        socket = PurePosixPath(args[args.index("--pod-resources-socket") + 1])
    assert mount["mountPath"] == str(socket.parent)


def rbac_rule_is_narrow(rule: dict[str, Any]) -> bool:
    """Reads core pods and nothing else: no wildcard, no other resource or API group, no write verb, no
    non-resource URL."""
    return (
        set(rule) <= {"apiGroups", "resources", "verbs", "resourceNames"}
        and rule.get("apiGroups") == [""]
        and bool(rule.get("resources")) and set(rule["resources"]) <= {"pods"}
        and bool(rule.get("verbs")) and set(rule["verbs"]) <= {"get", "list"}
    )  # fmt: skip


def test_rbac_rule_check_refuses_what_it_must() -> None:
    assert rbac_rule_is_narrow({"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]})
    for wider in ({"apiGroups": ["*"], "resources": ["pods"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["*"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["get"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["*"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
                  {"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]},
                  {"apiGroups": ["apps"], "resources": ["pods"], "verbs": ["get"]},
                  {"nonResourceURLs": ["*"], "verbs": ["get"]}):  # fmt: skip
        assert not rbac_rule_is_narrow(wider), wider


# The collector's role: fleet health's drain and resume of nodes (health/schedulers/kubernetes.py) and of
# single GPUs by DRA device taints (kubernetes_dra.py), no more.
COLLECTOR_RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceslices"], "verbs": ["get", "list"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["devicetaintrules"], "verbs": ["get", "list", "create", "delete"]},
]


def test_every_role_only_reads_pods_but_the_collectors_which_only_patches_nodes() -> None:
    roles = [d for d in documents() if d["kind"] in {"ClusterRole", "Role"}]
    assert roles, "the exporter's ClusterRole is missing"
    for role in roles:
        assert "aggregationRule" not in role, f"{role['metadata']['name']} aggregates other roles"
        assert role["rules"], f"{role['metadata']['name']} has no rules"
        if role["metadata"]["name"] == "gpuscope-collector-node-health":
            assert role["rules"] == COLLECTOR_RULES
            continue
        for rule in role["rules"]:
            assert rbac_rule_is_narrow(rule), f"{role['metadata']['name']}: {rule}"


def test_the_exporter_runs_as_its_service_account_bound_to_reading_pods_and_nothing_else() -> None:
    docs = documents()
    pod = workloads()["gpuscope-exporter"]["spec"]["template"]["spec"]
    account = pod["serviceAccountName"]
    assert pod["automountServiceAccountToken"] is True  # --pod-metadata auto reads the API server with it
    assert account in {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"}
    subject = {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}
    bindings = [d for d in docs if d["kind"] == "ClusterRoleBinding" and subject in d["subjects"]]
    assert len(bindings) == 1, f"{len(bindings)} ClusterRoleBindings bind {account}"
    binding = bindings[0]
    assert binding["subjects"] == [subject], "the binding grants its role to others too"
    assert binding["roleRef"]["apiGroup"] == "rbac.authorization.k8s.io"
    assert binding["roleRef"]["kind"] == "ClusterRole"
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterRole"}
    role = roles[binding["roleRef"]["name"]]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]


def test_kubectl_kustomize_renders_both_variants() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (the shape checks above still run)")
    for variant, objects in (("base", 13), ("timescaledb", 15)):
        result = subprocess.run([kubectl, "kustomize", str(KUBERNETES / variant)], capture_output=True, text=True,
                                timeout=60, check=False)  # fmt: skip
        assert result.returncode == 0, result.stderr
        rendered = [d for d in yaml.safe_load_all(result.stdout) if d]
        assert len(rendered) == objects
        for doc in rendered:
            namespace = doc["metadata"].get("namespace")
            expected = None if doc["kind"] in CLUSTER_SCOPED else NAMESPACE
            assert namespace == expected, f"{doc['kind']} {doc['metadata']['name']} in namespace {namespace}"
        kinds = {(d["kind"], d["metadata"]["name"]): d for d in rendered}
        assert ("ServiceAccount", "gpuscope-exporter") in kinds
        assert ("ClusterRole", "gpuscope-exporter-pod-reader") in kinds
        binding = kinds["ClusterRoleBinding", "gpuscope-exporter-pod-reader"]
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "gpuscope-exporter", "namespace": NAMESPACE}]
