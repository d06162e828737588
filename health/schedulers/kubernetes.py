"""Kubernetes through the official client: a drain is a cordon (spec.unschedulable), a NoSchedule taint
that says why, an annotation holding the reason, and a node condition GpuscopeHealthy=False that
`kubectl describe node` shows; a resume undoes exactly these. As with Slurm's drain, running pods are
left to finish: evicting them is the site's decision (a PodDisruptionBudget-aware `kubectl drain`).
Where the cluster runs Dynamic Resource Allocation, one bad GPU can be taken out instead of its node
(`drain_gpu`, a DeviceTaintRule: kubernetes_dra.py).

The collector's ServiceAccount needs get, list and patch on nodes and patch on nodes/status
(deploy/kubernetes/base/collector-rbac.yaml). The client is synchronous, so calls run in a thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from gpuscope.health.schedulers.base import REASON_PREFIX, Outcome, SchedulerNode
from gpuscope.health.schedulers.kubernetes_dra import DeviceDrain, DeviceTaints

TAINT_KEY = "gpuscope.io/unhealthy"
REASON_ANNOTATION = "gpuscope.io/drain-reason"
CONDITION = "GpuscopeHealthy"


class KubernetesScheduler:
    name = "kubernetes"

    def __init__(self, api: Any | None = None) -> None:
        """`api`: a kubernetes.client.CoreV1Api; None: the in-cluster configuration, else ~/.kube/config."""
        self._api = api
        self._gpus = DeviceTaints(lambda: self._client().api_client)

    def command(self, action: str, node: str, reason: str = "") -> str:
        if action == "drain":
            return f"cordon {node}, taint {TAINT_KEY}=true:NoSchedule, condition {CONDITION}=False ({reason})"
        return f"uncordon {node}, remove taint {TAINT_KEY}, condition {CONDITION}=True"

    async def drain(self, node: str, reason: str) -> Outcome:
        return await self._call(lambda api: self._drain(api, node, reason), self.command("drain", node, reason))

    async def resume(self, node: str) -> Outcome:
        return await self._call(lambda api: self._resume(api, node), self.command("resume", node))

    def gpu_command(self, action: str, node: str, gpu_uuid: str | None, gpu_index: int | None, reason: str = "") -> str:
        """What `drain_gpu` (action "drain") or `resume_gpu` ("resume") would do, in words."""
        return self._gpus.command(action, node, gpu_uuid, gpu_index, reason)

    async def gpu_drain_supported(self, node: str) -> bool:
        """Whether one GPU of `node` can be taken out alone (DRA device taints), rather than the node."""
        return await self._gpus.supported(node)

    async def drain_gpu(self, node: str, gpu_uuid: str | None, gpu_index: int | None, reason: str) -> Outcome:
        return await self._gpus.drain(node, gpu_uuid, gpu_index, reason)

    async def resume_gpu(self, node: str, gpu_uuid: str | None, gpu_index: int | None) -> Outcome:
        return await self._gpus.resume(node, gpu_uuid, gpu_index)

    async def gpu_drains(self, node: str) -> list[DeviceDrain]:
        """gpuscope's device taints on `node`; raises RuntimeError when they cannot be listed."""
        return await self._gpus.drains(node)

    async def nodes(self, names: Iterable[str]) -> dict[str, SchedulerNode]:
        wanted = set(names)
        if not wanted:
            return {}
        api = self._client()
        try:
            listed = await asyncio.to_thread(api.list_node)
        except Exception as exc:  # the client raises ApiException, urllib3 errors, ...: all "cannot ask"
            raise RuntimeError(f"cannot list nodes: {_why(exc)}") from None
        found = {}
        for item in listed.items:
            if item.metadata.name in wanted:
                found[item.metadata.name] = _seen(item)
        return found

    def _drain(self, api: Any, node: str, reason: str) -> None:
        current = api.read_node(node)
        taints = [t for t in (current.spec.taints or []) if t.key != TAINT_KEY]
        taints.append({"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"})
        api.patch_node(
            node,
            {
                "metadata": {"annotations": {REASON_ANNOTATION: reason}},
                "spec": {"unschedulable": True, "taints": [_plain(t) for t in taints]},
            },
        )
        api.patch_node_status(node, {"status": {"conditions": [_condition("False", "DrainedByGpuscope", reason)]}})

    def _resume(self, api: Any, node: str) -> None:
        current = api.read_node(node)
        taints = [_plain(t) for t in (current.spec.taints or []) if t.key != TAINT_KEY]
        api.patch_node(
            node,
            {
                "metadata": {"annotations": {REASON_ANNOTATION: None}},
                "spec": {"unschedulable": False, "taints": taints},
            },
        )
        api.patch_node_status(node, {"status": {"conditions": [_condition("True", "ValidatedByGpuscope", "")]}})

    async def _call(self, work: Callable[[Any], None], shown: str) -> Outcome:
        try:
            await asyncio.to_thread(work, self._client())
        except Exception as exc:  # any failure is an outcome to record, not a crash of the loop
            return Outcome(False, f"{shown}: {_why(exc)}")
        return Outcome(True, f"{shown}: done")

    def _client(self) -> Any:
        if self._api is None:
            from kubernetes import client, config

            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config()
            self._api = client.CoreV1Api()
        return self._api


def _seen(item: Any) -> SchedulerNode:
    annotations = item.metadata.annotations or {}
    cordoned = bool(item.spec.unschedulable)
    reason = annotations.get(REASON_ANNOTATION, "")
    if cordoned and not reason.startswith(REASON_PREFIX):
        reason = "cordoned outside gpuscope"
    return SchedulerNode(cordoned, reason if cordoned else "")


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"type": CONDITION, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now, "lastHeartbeatTime": now}  # fmt: skip


def _plain(taint: Any) -> dict[str, Any]:
    if isinstance(taint, dict):
        return taint
    fields = {"key": taint.key, "value": taint.value, "effect": taint.effect, "timeAdded": taint.time_added}
    return {k: (v.isoformat() if isinstance(v, datetime) else v) for k, v in fields.items() if v is not None}


def _why(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status == 403:
        return "forbidden: the collector's ServiceAccount needs patch on nodes and nodes/status (collector-rbac.yaml)"
    if status == 404:
        return "no such node in the cluster"
    return f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
