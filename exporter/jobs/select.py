"""Chooses job attribution from --jobs: slurm, k8s, none, or auto: Slurm when the node shows signs of it,
else Kubernetes when the kubelet's pod-resources socket is there, else none. Slurm goes first because
where slurmd itself runs in pods (Slinky, soperator) the kubelet sees the slurmd pod, not the jobs."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpuscope.exporter.jobs.base import JobSource
from gpuscope.exporter.jobs.kubernetes import DEFAULT_SOCKET, KubernetesJobs, PodMetadataSource
from gpuscope.exporter.jobs.pod_metadata import ApiServerPods, KubeletPods
from gpuscope.exporter.jobs.slurm import DEFAULT_CGROUP_ROOT, SlurmJobs
from gpuscope.exporter.sources.base import Source

log = logging.getLogger(__name__)


PodMetadata = Literal["auto", "apiserver", "kubelet", "none"]
KUBELET_PODS_URL = "http://127.0.0.1:10255/pods"


@dataclass(frozen=True)
class KubernetesOptions:
    node: str  # this node's name in Kubernetes: the API server lists the pods of this node
    interval: float = 5.0  # how often the kubelet is asked: the sampling interval
    socket: Path = DEFAULT_SOCKET
    pod_metadata: PodMetadata = "auto"
    kubelet_pods_url: str = KUBELET_PODS_URL


def open_jobs(
    mode: str,
    source: Source,
    mapping_dir: Path,
    cgroup_root: Path = DEFAULT_CGROUP_ROOT,
    kubernetes: KubernetesOptions | None = None,
) -> JobSource | None:
    if mode == "none":
        return None
    k8s = kubernetes or KubernetesOptions(node="")
    if mode == "k8s":
        return open_kubernetes(k8s)
    slurm_signs = [mapping_dir, cgroup_root / "system.slice" / "slurmstepd.scope", cgroup_root / "slurm"]
    if mode == "auto" and not any(path.is_dir() for path in slurm_signs):
        if k8s.socket.exists():
            return open_kubernetes(k8s)
        log.info(
            "jobs: neither Slurm (%s) nor a kubelet (%s) on this node; no job attribution",
            ", ".join(map(str, slurm_signs)),
            k8s.socket,
        )
        return None
    pids_of: Callable[[int], list[int]] | None = _method(source, "running_pids")
    mig_pids_of: Callable[[int], dict[str, list[int]]] | None = _method(source, "mig_running_pids")
    log.info("jobs: Slurm (mapping files in %s%s)", mapping_dir, ", NVML processes" if pids_of else "")
    return SlurmJobs(mapping_dir, pids_of=pids_of, cgroup_root=cgroup_root, mig_pids_of=mig_pids_of)


def _method(source: Source, name: str) -> Any | None:
    """The source's (or one of its parts') bound method `name`, if it has one."""
    for part in getattr(source, "parts", (source,)):
        method = getattr(part, name, None)
        if method is not None:
            return method
    return None


def open_kubernetes(options: KubernetesOptions) -> KubernetesJobs:
    metadata = pod_metadata(options)
    log.info(
        "jobs: Kubernetes, pods from %s, pod labels from %s",
        options.socket,
        metadata.describe() if metadata else "nowhere (--pod-metadata none: each pod is its own job)",
    )
    return KubernetesJobs(options.socket, metadata, interval=options.interval)


def pod_metadata(options: KubernetesOptions) -> PodMetadataSource | None:
    """Where pod labels come from: the API server when this runs in a pod with a ServiceAccount (auto),
    else the kubelet's read-only pod list."""
    if options.pod_metadata == "none":
        return None
    if options.pod_metadata in ("auto", "apiserver"):
        server = ApiServerPods.in_cluster(options.node)
        if server is not None:
            return server
        if options.pod_metadata == "apiserver":
            raise ValueError(
                "--pod-metadata apiserver: not running in a Kubernetes pod with a ServiceAccount token"
                " (KUBERNETES_SERVICE_HOST and /var/run/secrets/kubernetes.io/serviceaccount/token)"
            )
    return KubeletPods(options.kubelet_pods_url)
