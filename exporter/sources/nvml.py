"""NVIDIA GPUs through NVML (nvidia-ml-py, imported as `pynvml`).

Every NVML call goes through a GroupGuard (exporter/sources/errors.py): a group the GPU does not
support is remembered and skipped (its metrics are absent, never 0), a GPU that fell off the bus is
reported down while the others keep reporting, and any other error is logged once. Slowly changing
counters (ECC, remapped rows, NVLink errors, throttle time, power limit) are read every SLOW_EVERY
cycles and carried over. XID errors arrive through NVML events on a thread of their own and are
counted per code.
"""

from __future__ import annotations

import functools
import importlib
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, PortReading
from gpuscope.exporter.sources import nvml_fields
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.errors import GroupGuard, LogOnce

log = logging.getLogger(__name__)

# A group of NVML calls fills catalog values and per-link values.
Links = dict[int, dict[str, float]]
GroupReader = Callable[[dict[str, float], Links], None]

SLOW_EVERY = 10
XID_WAIT_MS = 1000
NS_PER_S = 1e9


def load_pynvml() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise BackendUnavailable(
            f"the nvidia-ml-py package is not installed ({exc}); pip install nvidia-ml-py"
        ) from None


class NvmlSource:
    name = "nvml"

    def __init__(self, nvml: ModuleType | None = None, xid_events: bool = True) -> None:
        self._nvml = nvml if nvml is not None else load_pynvml()
        try:
            self._nvml.nvmlInit()
        except self._nvml.NVMLError as exc:
            raise BackendUnavailable(
                f"NVML could not start: {exc}. Is the NVIDIA driver installed and loaded (nvidia-smi works)?"
            ) from None
        self._log_once = LogOnce(log)
        self.driver_version = _text(self._nvml.nvmlSystemGetDriverVersion())
        self.devices = [
            _Device(self._nvml, i, self._nvml.nvmlDeviceGetHandleByIndex(i), self._log_once)
            for i in range(self._nvml.nvmlDeviceGetCount())
        ]
        self._cycle = 0
        self._xid = _XidListener(self._nvml, self.devices, self._log_once) if xid_events else None

    @property
    def gpus(self) -> tuple[GpuIdentity, ...]:
        return tuple(device.identity for device in self.devices)

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        slow = self._cycle % SLOW_EVERY == 0
        self._cycle += 1
        xids = self._xid.counts() if self._xid else {}
        return tuple(device.read(slow, xids.get(device.identity.uuid, {})) for device in self.devices), ()

    def running_pids(self, index: int) -> list[int]:
        """PIDs of compute processes on GPU `index` (for job attribution); [] when unknown."""
        device = self.devices[index]
        try:
            return [int(p.pid) for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(device.handle)]
        except self._nvml.NVMLError:
            return []

    def close(self) -> None:
        if self._xid is not None:
            self._xid.stop()
        for device in self.devices:
            device.free()
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.debug("nvmlShutdown: %s", exc)


class _Device:
    def __init__(self, nvml: ModuleType, index: int, handle: Any, log_once: LogOnce) -> None:
        self._nvml = nvml
        self.index = index
        self.handle = handle
        self.lost = False
        self._slow_values: dict[str, float] = {}
        self._slow_links: dict[int, dict[str, float]] = {}
        self.identity = GpuIdentity(
            index=index,
            uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
            model=_text(nvml.nvmlDeviceGetName(handle)),
            pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
        )
        self._guard = GroupGuard(
            f"GPU {index} ({self.identity.model})",
            log_once,
            errors=nvml.NVMLError,
            is_unsupported=lambda exc: isinstance(exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound)),
            passthrough=(nvml.NVMLError_GpuIsLost,),  # handled per device: reported down
        )
        self.link_count = self._link_count()
        self._requests: list[tuple[int, int]] = [(nvml.NVML_FI_DEV_MEMORY_TEMP, 0)]
        for link in range(self.link_count):
            self._requests += [
                (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, link),
                (nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, link),
            ]
        self._gpm_samples: list[Any] = []
        self._gpm_ready = False
        if self._supports_gpm():
            self._gpm_samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            # One request, reused: the structure holds room for every GPM metric and is costly to build.
            self._gpm_request = nvml.c_nvmlGpmMetricsGet_t()
            self._gpm_request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            self._gpm_request.numMetrics = 2
            self._gpm_request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
            self._gpm_request.metrics[1].metricId = nvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL

    def read(self, slow: bool, xid_counts: dict[int, int]) -> GpuReading:
        values: dict[str, float] = {}
        links: dict[int, dict[str, float]] = defaultdict(dict)
        try:
            for group, reader in self._fast_groups:
                self._guard.run(group, reader, values, links)
            if slow:
                self._slow_values, self._slow_links = {}, defaultdict(dict)
                for group, reader in self._slow_groups:
                    self._guard.run(group, reader, self._slow_values, self._slow_links)
        except self._nvml.NVMLError_GpuIsLost:
            if not self.lost:
                log.error("GPU %d (%s) fell off the bus; reporting it down", self.index, self.identity.uuid)
            self.lost = True
            self._gpm_ready = False
            return GpuReading(gpu=self.identity, up=False, xid_counts=dict(xid_counts))
        if self.lost:
            log.warning("GPU %d (%s) answers again", self.index, self.identity.uuid)
            self.lost = False
        values.update(self._slow_values)
        for link, link_values in self._slow_links.items():
            links[link].update(link_values)
        return GpuReading(gpu=self.identity, up=True, values=values, links=dict(links), xid_counts=dict(xid_counts))

    def free(self) -> None:
        for sample in self._gpm_samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError as exc:
                log.debug("nvmlGpmSampleFree: %s", exc)
        self._gpm_samples = []

    # --- groups of calls; each fills `values` (catalog key -> native unit) and `links` ---

    @functools.cached_property
    def _fast_groups(self) -> list[tuple[str, GroupReader]]:
        return [
            ("utilization", self._utilization),
            ("memory", self._memory),
            ("temperature", self._temperature),
            ("power", self._power),
            ("energy", self._energy),
            ("clocks", self._clocks),
            ("clock_events", self._clock_events),
            ("pcie_throughput", self._pcie_throughput),
            ("fields", self._fields),
            ("gpm", self._gpm),
        ]

    @functools.cached_property
    def _slow_groups(self) -> list[tuple[str, GroupReader]]:
        return [
            ("power_limit", self._power_limit),
            ("violation", self._violation),
            ("pcie_replay", self._pcie_replay),
            ("ecc", self._ecc),
            ("remapped_rows", self._remapped_rows),
            ("nvlink_errors", self._nvlink_errors),
        ]

    def _utilization(self, values: dict[str, float], _: Any) -> None:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self.handle)
        values["util_pct"], values["mem_copy_util_pct"] = float(rates.gpu), float(rates.memory)

    def _memory(self, values: dict[str, float], _: Any) -> None:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(self.handle)
        values["fb_used_bytes"], values["fb_total_bytes"] = float(memory.used), float(memory.total)

    def _temperature(self, values: dict[str, float], _: Any) -> None:
        values["temp_c"] = float(self._nvml.nvmlDeviceGetTemperature(self.handle, self._nvml.NVML_TEMPERATURE_GPU))

    def _power(self, values: dict[str, float], _: Any) -> None:
        values["power_w"] = self._nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0  # mW

    def _energy(self, values: dict[str, float], _: Any) -> None:
        values["energy_j"] = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0  # mJ

    def _clocks(self, values: dict[str, float], _: Any) -> None:
        nvml = self._nvml
        values["sm_clock_mhz"] = float(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM))
        values["mem_clock_mhz"] = float(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_MEM))

    def _clock_events(self, values: dict[str, float], _: Any) -> None:
        values["clock_event_reasons"] = float(self._nvml.nvmlDeviceGetCurrentClocksEventReasons(self.handle))

    def _pcie_throughput(self, values: dict[str, float], _: Any) -> None:
        nvml = self._nvml
        values["pcie_tx_bytes_per_s"] = (
            nvml.nvmlDeviceGetPcieThroughput(self.handle, nvml.NVML_PCIE_UTIL_TX_BYTES) * 1024.0
        )
        values["pcie_rx_bytes_per_s"] = (
            nvml.nvmlDeviceGetPcieThroughput(self.handle, nvml.NVML_PCIE_UTIL_RX_BYTES) * 1024.0
        )

    def _fields(self, values: dict[str, float], links: dict[int, dict[str, float]]) -> None:
        """Memory temperature and per-link NVLink throughput in one call; each field has its own status."""
        nvml = self._nvml
        field_id, scope, ok, value = nvml_fields.decode(
            nvml, nvml.nvmlDeviceGetFieldValues(self.handle, self._requests)
        )
        tx_id = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
        for fid, link, good, number in zip(field_id.tolist(), scope.tolist(), ok.tolist(), value.tolist(), strict=True):
            if not good:
                continue
            if fid == nvml.NVML_FI_DEV_MEMORY_TEMP:
                values["mem_temp_c"] = number
            elif fid == tx_id:
                links[link]["link_tx_bytes"] = number * 1024.0  # KiB
            else:
                links[link]["link_rx_bytes"] = number * 1024.0
        if self.link_count:
            tx = ok & (field_id == nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX)
            rx = ok & (field_id == nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
            values["nvlink_tx_bytes"] = float(value[tx].sum()) * 1024.0
            values["nvlink_rx_bytes"] = float(value[rx].sum()) * 1024.0

    def _gpm(self, values: dict[str, float], _: Any) -> None:
        """SM and tensor activity from GPU Performance Monitoring (Hopper+), which needs two samples."""
        if not self._gpm_samples:
            raise self._nvml.NVMLError(self._nvml.NVML_ERROR_NOT_SUPPORTED)
        nvml = self._nvml
        previous, current = self._gpm_samples
        nvml.nvmlGpmSampleGet(self.handle, current)
        if self._gpm_ready:
            request = self._gpm_request
            request.sample1, request.sample2 = previous, current
            nvml.nvmlGpmMetricsGet(request)
            for metric, key in zip(request.metrics[:2], ("sm_active_pct", "tensor_active_pct"), strict=True):
                if metric.nvmlReturn == nvml.NVML_SUCCESS:
                    values[key] = min(100.0, max(0.0, float(metric.value)))
        self._gpm_samples = [current, previous]
        self._gpm_ready = True

    def _power_limit(self, values: dict[str, float], _: Any) -> None:
        values["power_limit_w"] = self._nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0

    def _violation(self, values: dict[str, float], _: Any) -> None:
        nvml = self._nvml
        power = nvml.nvmlDeviceGetViolationStatus(self.handle, nvml.NVML_PERF_POLICY_POWER)
        thermal = nvml.nvmlDeviceGetViolationStatus(self.handle, nvml.NVML_PERF_POLICY_THERMAL)
        values["throttle_power_s"] = power.violationTime / NS_PER_S
        values["throttle_thermal_s"] = thermal.violationTime / NS_PER_S

    def _pcie_replay(self, values: dict[str, float], _: Any) -> None:
        values["pcie_replay"] = float(self._nvml.nvmlDeviceGetPcieReplayCounter(self.handle))

    def _ecc(self, values: dict[str, float], _: Any) -> None:
        nvml = self._nvml
        for key, kind in (
            ("ecc_corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("ecc_uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            values[key] = float(nvml.nvmlDeviceGetTotalEccErrors(self.handle, kind, nvml.NVML_VOLATILE_ECC))

    def _remapped_rows(self, values: dict[str, float], _: Any) -> None:
        correctable, uncorrectable, pending, failure = self._nvml.nvmlDeviceGetRemappedRows(self.handle)
        values["remapped_rows_correctable"] = float(correctable)
        values["remapped_rows_uncorrectable"] = float(uncorrectable)
        values["remap_pending"] = 1.0 if pending else 0.0
        values["remap_failure"] = 1.0 if failure else 0.0

    def _nvlink_errors(self, values: dict[str, float], links: dict[int, dict[str, float]]) -> None:
        if not self.link_count:
            return
        nvml = self._nvml
        counters = {
            "link_crc_errors": (nvml.NVML_NVLINK_ERROR_DL_CRC_FLIT, nvml.NVML_NVLINK_ERROR_DL_CRC_DATA),
            "link_replay_errors": (nvml.NVML_NVLINK_ERROR_DL_REPLAY,),
            "link_recovery_errors": (nvml.NVML_NVLINK_ERROR_DL_RECOVERY,),
        }
        totals = dict.fromkeys(counters, 0.0)
        for link in range(self.link_count):
            for key, kinds in counters.items():
                count = float(sum(nvml.nvmlDeviceGetNvLinkErrorCounter(self.handle, link, k) for k in kinds))
                links[link][key] = count
                totals[key] += count
        values["nvlink_crc_errors"] = totals["link_crc_errors"]
        values["nvlink_replay_errors"] = totals["link_replay_errors"]
        values["nvlink_recovery_errors"] = totals["link_recovery_errors"]

    # --- capabilities probed once ---

    def _link_count(self) -> int:
        nvml = self._nvml
        try:
            results = nvml.nvmlDeviceGetFieldValues(self.handle, [(nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)])
        except nvml.NVMLError:
            return 0
        _, _, ok, value = nvml_fields.decode(nvml, results)
        return int(value[0]) if ok[0] else 0

    def _supports_gpm(self) -> bool:
        try:
            return bool(self._nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice)
        except (self._nvml.NVMLError, AttributeError):  # AttributeError: a binding older than GPM
            return False


class _XidListener:
    """Counts XID errors per GPU and code from NVML's event stream (XIDs are events, not gauges)."""

    def __init__(self, nvml: ModuleType, devices: list[_Device], log_once: LogOnce) -> None:
        self._nvml = nvml
        self._counts: dict[str, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._event_set = nvml.nvmlEventSetCreate()
        registered = 0
        for device in devices:
            try:
                nvml.nvmlDeviceRegisterEvents(device.handle, nvml.nvmlEventTypeXidCriticalError, self._event_set)
                registered += 1
            except nvml.NVMLError as exc:
                log_once(("xid", device.index), logging.INFO, "GPU %d: XID events unavailable (%s)", device.index, exc)
        self._thread = threading.Thread(target=self._run, name="nvml-xid", daemon=True)
        if registered:
            self._thread.start()

    def counts(self) -> dict[str, dict[int, int]]:
        with self._lock:
            return {uuid: dict(codes) for uuid, codes in self._counts.items()}

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(XID_WAIT_MS / 1000 * 3)
        try:
            self._nvml.nvmlEventSetFree(self._event_set)
        except self._nvml.NVMLError as exc:
            log.debug("nvmlEventSetFree: %s", exc)

    def _run(self) -> None:
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                event = nvml.nvmlEventSetWait(self._event_set, XID_WAIT_MS)
                uuid = _text(nvml.nvmlDeviceGetUUID(event.device))
            except nvml.NVMLError_Timeout:
                continue
            except nvml.NVMLError as exc:
                log.warning("waiting for XID events failed: %s", exc)
                self._stop.wait(5.0)
                continue
            xid = int(event.eventData)
            log.warning("XID %d on GPU %s", xid, uuid)
            with self._lock:
                self._counts[uuid][xid] += 1


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
