"""Kubernetes with Dynamic Resource Allocation: take one bad GPU out, not its node. A DeviceTaintRule
(resource.k8s.io; v1alpha3 from Kubernetes 1.33 behind the DRADeviceTaints feature gate, later v1beta2
and v1) taints the GPU's device with gpuscope.io/unhealthy=true:NoSchedule, so no new ResourceClaim is
given it, while the node and its other GPUs stay in service. NoSchedule, not NoExecute: as with a node
drain, pods already using the device are left to finish.

Each rule is named after the node and the device, labelled as gpuscope's, and annotated with the reason,
the node and the GPU, so that a resume finds it even when the device has left the ResourceSlices (a GPU
that fell off the bus is often no longer published).

Objects go through CustomObjectsApi as plain dicts: which version serves DeviceTaintRules differs between
Kubernetes releases and discovery says which, where a typed class would pin one. RBAC: get and list on
resourceslices; get, list, create and delete on devicetaintrules (collector-rbac.yaml)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpuscope.health.schedulers.base import Outcome
from gpuscope.health.schedulers.kubernetes_dra_devices import GPU_DRIVER, GpuDevice, find_gpu, gpu_devices

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
RULES = "devicetaintrules"
SLICES = "resourceslices"
TAINT_KEY = "gpuscope.io/unhealthy"  # the node adapter's taint key, so one toleration covers both
REASON_ANNOTATION = "gpuscope.io/drain-reason"
NODE_ANNOTATION = "gpuscope.io/node"
UUID_ANNOTATION = "gpuscope.io/gpu-uuid"
INDEX_ANNOTATION = "gpuscope.io/gpu-index"
MANAGED_BY = "app.kubernetes.io/managed-by"
SUPPORT_TTL_S = 300.0  # how long an answer about what the cluster serves, and a node's GPUs, is kept
FORBIDDEN = ("forbidden: the collector's ServiceAccount needs get and list on resourceslices and get, list, "
             "create and delete on devicetaintrules (collector-rbac.yaml)")  # fmt: skip


class Refused(Exception):
    """A drain or resume that cannot be done, for a reason this module words itself."""


class NotServed(Refused):
    """The API server serves no DeviceTaintRules or no ResourceSlices: only the node can be drained."""


@dataclass(frozen=True)
class DeviceDrain:
    """One of gpuscope's DeviceTaintRules: a GPU kept from new claims."""

    rule: str
    device: str
    gpu_uuid: str | None
    gpu_index: int | None
    reason: str


class DeviceTaints:
    def __init__(self, api_client: Callable[[], Any], clock: Callable[[], float] = time.monotonic) -> None:
        """`api_client`: gives the kubernetes.client.ApiClient to call through, when first needed."""
        self._api_client = api_client
        self._clock = clock
        self._served_cache: tuple[float, dict[str, str]] | None = None
        self._supported: dict[str, tuple[float, bool]] = {}
        self._logged: set[str] = set()

    def command(self, action: str, node: str, gpu_uuid: str | None, gpu_index: int | None, reason: str = "") -> str:
        """What `action` (drain | resume) does for this GPU, in words: what a dry run records."""
        gpu = _gpu(gpu_uuid, gpu_index)
        if action == "drain":
            return f"taint device of GPU {gpu} of node {node} (DRA) with {TAINT_KEY}=true:NoSchedule ({reason})"
        return f"remove taint {TAINT_KEY} from device of GPU {gpu} of node {node} (DRA)"

    async def supported(self, node: str) -> bool:
        """Whether the cluster serves DeviceTaintRules and `node` publishes its GPUs as DRA devices."""
        cached = self._supported.get(node)
        if cached is not None and cached[0] > self._clock():
            return cached[1]
        answer = await asyncio.to_thread(self._supported_now, node)
        self._supported[node] = (self._clock() + SUPPORT_TTL_S, answer)
        return answer

    async def drain(self, node: str, gpu_uuid: str | None, gpu_index: int | None, reason: str) -> Outcome:
        shown = self.command("drain", node, gpu_uuid, gpu_index, reason)
        if not gpu_uuid and gpu_index is None:
            return Outcome(False, f"{shown}: no GPU named")
        return await _outcome(shown, lambda: self._drain(node, gpu_uuid, gpu_index, reason))

    async def resume(self, node: str, gpu_uuid: str | None, gpu_index: int | None) -> Outcome:
        shown = self.command("resume", node, gpu_uuid, gpu_index)
        if not gpu_uuid and gpu_index is None:
            return Outcome(False, f"{shown}: no GPU named")
        return await _outcome(shown, lambda: self._resume(node, gpu_uuid, gpu_index))

    async def drains(self, node: str) -> list[DeviceDrain]:
        """gpuscope's device taints on `node`'s GPUs; one an operator deleted is no longer here."""
        try:
            return await asyncio.to_thread(self._drains, node)
        except Exception as exc:  # the loop logs it, as it does a node list that failed
            raise RuntimeError(f"cannot list device taint rules: {_why(exc)}") from None

    def _supported_now(self, node: str) -> bool:
        try:
            devices = self._devices(node)
        except Exception as exc:  # not served, forbidden, unreachable: the node is drained instead
            self._log_once(f"GPUs are taken out by draining their node: {_why(exc)}")  # once, not once a node
            return False
        if not devices:
            self._log_once(f"node {node} publishes no {GPU_DRIVER} GPU for DRA: its GPUs are taken out by draining it")
        return bool(devices)

    def _drain(self, node: str, gpu_uuid: str | None, gpu_index: int | None, reason: str) -> str:
        version = self._served()[RULES]
        devices = self._devices(node)
        device = find_gpu(devices, gpu_uuid, gpu_index)
        if device is None:
            published = ", ".join(str(d) for d in devices) or "none"
            raise Refused(f"no GPU {_gpu(gpu_uuid, gpu_index)} among node {node}'s DRA devices ({published})")
        rule = rule_for(version, node, device, gpu_uuid, gpu_index, reason)
        name = rule["metadata"]["name"]
        where = f"DeviceTaintRule {name} on device {device.name} (driver {device.driver}, pool {device.pool})"
        try:
            self._custom().create_cluster_custom_object(GROUP, version, RULES, rule)
        except Exception as exc:
            if getattr(exc, "status", None) != 409:
                raise
            existing = self._custom().get_cluster_custom_object(GROUP, version, RULES, name)
            if not _ours(existing) or existing.get("spec", {}).get("deviceSelector") != rule["spec"]["deviceSelector"]:
                raise Refused(f"a DeviceTaintRule {name} exists that gpuscope did not make for this device") from None
            return f"{where} was already in place"
        return f"done, {where}"

    def _resume(self, node: str, gpu_uuid: str | None, gpu_index: int | None) -> str:
        version = self._served()[RULES]
        ours = [d for d in self._drains(node) if _names_gpu(d, gpu_uuid, gpu_index)]
        if not ours:
            return "done, no DeviceTaintRule of gpuscope's for this GPU to delete"
        for drain in ours:
            try:
                self._custom().delete_cluster_custom_object(GROUP, version, RULES, drain.rule)
            except Exception as exc:
                if getattr(exc, "status", None) != 404:  # gone already: what a resume wants
                    raise
        return "done, deleted DeviceTaintRule " + ", ".join(d.rule for d in ours)

    def _drains(self, node: str) -> list[DeviceDrain]:
        version = self._served()[RULES]
        ours = f"{MANAGED_BY}=gpuscope"
        listed = self._custom().list_cluster_custom_object(GROUP, version, RULES, label_selector=ours)
        items = listed.get("items") or []
        return [_drain_of(item) for item in items if _annotations(item).get(NODE_ANNOTATION) == node]

    def _devices(self, node: str) -> list[GpuDevice]:
        version = self._served()[SLICES]
        # spec.nodeName is a field selector the API server supports for ResourceSlices: only this node's come back
        on_node = f"spec.nodeName={node}"
        listed = self._custom().list_cluster_custom_object(GROUP, version, SLICES, field_selector=on_node)
        return gpu_devices(listed.get("items") or [])

    def _served(self) -> dict[str, str]:
        """The version that serves each of RULES and SLICES, by discovery, kept for SUPPORT_TTL_S."""
        if self._served_cache is None or self._served_cache[0] <= self._clock():
            self._served_cache = (self._clock() + SUPPORT_TTL_S, self._discover())
        served = self._served_cache[1]
        missing = sorted({RULES, SLICES} - served.keys())
        if missing:
            raise NotServed(f"the API server serves no {GROUP} {' or '.join(missing)} (DeviceTaintRules need "
                            "Kubernetes 1.33+ with the DRADeviceTaints feature gate)")  # fmt: skip
        return served

    def _discover(self) -> dict[str, str]:
        from kubernetes import client

        api_client = self._api_client()
        try:
            group = client.ResourceApi(api_client).get_api_group()
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return {}
            raise
        found: dict[str, str] = {}
        for entry in group.versions:  # the server lists them by its preference
            try:
                listed = client.CustomObjectsApi(api_client).get_api_resources(GROUP, entry.version)
            except Exception as exc:
                if getattr(exc, "status", None) == 404:
                    continue
                raise
            for resource in listed.resources:
                if resource.name in (RULES, SLICES):
                    found.setdefault(resource.name, entry.version)
        return found

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self._api_client())

    def _log_once(self, message: str) -> None:
        if message not in self._logged:
            self._logged.add(message)
            log.info("%s", message)


def rule_for(
    version: str, node: str, device: GpuDevice, gpu_uuid: str | None, gpu_index: int | None, reason: str
) -> dict[str, Any]:
    """The DeviceTaintRule, in `version` of resource.k8s.io, that keeps new claims off `device`."""
    uuid = gpu_uuid or device.uuid
    index = gpu_index if gpu_index is not None else device.index
    annotations = {REASON_ANNOTATION: reason, NODE_ANNOTATION: node, UUID_ANNOTATION: uuid or "",
                   INDEX_ANNOTATION: "" if index is None else str(index)}  # fmt: skip
    metadata = {"name": rule_name(node, device.name), "labels": {MANAGED_BY: "gpuscope"},
                "annotations": {k: v for k, v in annotations.items() if v}}  # fmt: skip
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "DeviceTaintRule",
        "metadata": metadata,
        "spec": {
            "deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.name},
            "taint": {"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"},
        },
    }


def rule_name(node: str, device: str) -> str:
    """`gpuscope-<node>-<device>`, a valid object name (DNS-1123 subdomain); one that had to be changed to
    be valid, or shortened, ends in a hash of the original so that two devices never share a rule."""
    wanted = f"gpuscope-{node}-{device}"
    name = re.sub(r"[^a-z0-9.-]+", "-", wanted.lower())
    name = re.sub(r"-*\.-*", ".", name).strip(".-")
    if name == wanted and len(name) <= 253:
        return name
    digest = hashlib.sha256(wanted.encode()).hexdigest()[:10]
    return f"{name[:242].rstrip('.-')}-{digest}"


async def _outcome(shown: str, work: Callable[[], str]) -> Outcome:
    try:
        said = await asyncio.to_thread(work)
    except Exception as exc:  # any failure is an outcome to record, not a crash of the loop
        return Outcome(False, f"{shown}: {_why(exc)}")
    return Outcome(True, f"{shown}: {said}")


def _drain_of(rule: dict[str, Any]) -> DeviceDrain:
    annotations = _annotations(rule)
    index = annotations.get(INDEX_ANNOTATION, "")
    device = (rule.get("spec", {}).get("deviceSelector") or {}).get("device", "")
    return DeviceDrain(rule["metadata"]["name"], device, annotations.get(UUID_ANNOTATION) or None,
                       int(index) if index.isdigit() else None, annotations.get(REASON_ANNOTATION, ""))  # fmt: skip


def _annotations(item: dict[str, Any]) -> dict[str, str]:
    return item.get("metadata", {}).get("annotations") or {}


def _ours(rule: dict[str, Any]) -> bool:
    return (rule.get("metadata", {}).get("labels") or {}).get(MANAGED_BY) == "gpuscope"


def _names_gpu(drain: DeviceDrain, gpu_uuid: str | None, gpu_index: int | None) -> bool:
    if gpu_uuid and drain.gpu_uuid:
        return drain.gpu_uuid.lower() == gpu_uuid.lower()
    return gpu_index is not None and drain.gpu_index == gpu_index


def _gpu(gpu_uuid: str | None, gpu_index: int | None) -> str:
    return gpu_uuid or ("?" if gpu_index is None else str(gpu_index))


def _why(exc: Exception) -> str:
    if isinstance(exc, Refused):
        return str(exc)
    status = getattr(exc, "status", None)
    if status == 403:
        return FORBIDDEN
    if status == 404:
        return f"not found: is {GROUP} served with DeviceTaintRules (the DRADeviceTaints feature gate)?"
    return f"{type(exc).__name__}: {getattr(exc, 'reason', None) or exc}"
