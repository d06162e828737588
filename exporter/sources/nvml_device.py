"""One NVIDIA GPU through NVML: its groups of calls, read every cycle (fast) or every SLOW_EVERY cycles
(slow, carried over in between), and how it reports falling off the bus.

Every call goes through a GroupGuard (exporter/sources/errors.py): a group the GPU does not support,
or may not be asked by this process, is remembered and skipped until the GPU changes mode (MIG on or
off); a GPU that fell off the bus is reported down; any other error is logged once.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, MigReading
from gpuscope.exporter.sources import nvml_fields
from gpuscope.exporter.sources.errors import GroupGuard, LogOnce
from gpuscope.exporter.sources.nvml_fields import Fields, text
from gpuscope.exporter.sources.nvml_gpm import GpmPair, metrics_request
from gpuscope.exporter.sources.nvml_memory import MemoryReader
from gpuscope.exporter.sources.nvml_mig import MigLayout, activity_from_instances
from gpuscope.exporter.sources.nvml_nvlink import NvlinkErrors, NvlinkThroughput
from gpuscope.exporter.sources.nvml_pcie import PcieCounters, PcieThroughputThread
from gpuscope.exporter.sources.nvml_recovery import RecoveryAction

log = logging.getLogger(__name__)

Links = dict[int, dict[str, float]]
GroupReader = Callable[[dict[str, float], Links], None]
NS_PER_S = 1e9


class NvmlDevice:
    def __init__(
        self,
        nvml: ModuleType,
        index: int,
        handle: Any,
        log_once: LogOnce,
        memory: MemoryReader,
        pcie_thread: PcieThroughputThread,
    ) -> None:
        self._nvml = nvml
        self.index = index
        self.handle = handle
        self.lost = False
        self.identity = GpuIdentity(
            index=index,
            uuid=text(nvml.nvmlDeviceGetUUID(handle)),
            model=text(nvml.nvmlDeviceGetName(handle)),
            pci_bus_id=text(nvml.nvmlDeviceGetPciInfo(handle).busId),
            serial=_serial(nvml, handle),
        )
        self._log_once = log_once
        self._memory = memory
        self._pcie_thread = pcie_thread
        self._label = f"GPU {index} ({self.identity.model})"
        self._guard = GroupGuard(
            self._label,
            log_once,
            errors=nvml.NVMLError,
            is_unsupported=lambda exc: isinstance(
                exc, (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NoPermission)
            ),
            passthrough=(nvml.NVMLError_GpuIsLost,),  # handled per device: reported down
        )
        self._slow_values: dict[str, float] = {}
        self._slow_links: Links = {}
        self._fb_total: float | None = None
        link_count = self._link_count()
        self._memory_temp_supported = True
        self._pcie = PcieCounters(nvml)
        self._pcie_sampled = False  # True: the throughput thread measures this GPU
        if not self._pcie.supported:
            self._sample_pcie_on_the_thread()
        self._nvlink = NvlinkThroughput(nvml, link_count) if link_count else None
        self._nvlink_errors = NvlinkErrors(nvml, handle, link_count, self._label, log_once) if link_count else None
        self._recovery = RecoveryAction(nvml)
        self._requests: list[tuple[int, int]] = []
        self._build_requests()
        self._gpm_request = self._gpm_metrics_request()
        self._gpm = self._gpm_pair()
        self._mig: MigLayout | None = None
        self._fast_groups: list[tuple[str, GroupReader]] = [
            ("utilization", self._utilization),
            ("memory", self._read_memory),
            ("temperature", self._temperature),
            ("power", self._power),
            ("energy", self._energy),
            ("clocks", self._clocks),
            ("clock_events", self._clock_events),
            ("video", self._video),
            ("fields", self._fields),
        ]
        if self._gpm is not None:
            self._fast_groups.append(("gpm", self._read_gpm))
        self._slow_groups: list[tuple[str, GroupReader]] = [
            ("mig", self._mig_mode),  # first: the mode decides what the other groups may ask
            ("power_limit", self._power_limit),
            ("violation", self._violation),
            ("pcie_replay", self._pcie_replay),
            ("ecc", self._ecc),
            ("remapped_rows", self._remapped_rows),
            ("vgpu_license", self._vgpu_license),
        ]
        if self._nvlink_errors is not None:
            self._slow_groups.append(("nvlink_errors", self._nvlink_errors.read))

    def read(self, slow: bool, xid_counts: dict[int, int]) -> GpuReading:
        values: dict[str, float] = {}
        links: Links = defaultdict(dict)
        mig: tuple[MigReading, ...] = ()
        try:
            if slow:
                slow_values: dict[str, float] = {}
                slow_links: Links = defaultdict(dict)
                for group, reader in self._slow_groups:
                    self._guard.run(group, reader, slow_values, slow_links)
                self._slow_values, self._slow_links = slow_values, slow_links
            for group, reader in self._fast_groups:
                self._guard.run(group, reader, values, links)
            if "fields" in self._guard.unsupported and not self._pcie_sampled:
                self._sample_pcie_on_the_thread()  # no field values at all: no byte counters either
            if self._mig is not None:
                mig = self._mig.read()
        except self._nvml.NVMLError_GpuIsLost:
            if not self.lost:
                log.error("GPU %d (%s) fell off the bus; reporting it down", self.index, self.identity.uuid)
            self.lost = True
            for pair in (self._gpm, self._mig):
                if pair is not None:
                    pair.reset()
            return GpuReading(gpu=self.identity, up=False, xid_counts=dict(xid_counts))
        if self.lost:
            log.warning("GPU %d (%s) answers again", self.index, self.identity.uuid)
            self.lost = False
        if self._pcie_sampled:
            values.update(self._pcie_thread.latest(self.index))
        if mig and "fb_used_bytes" not in values:
            _memory_from_instances(mig, values)
        if mig:
            activity_from_instances(mig, values)
        values.update(self._slow_values)
        for link, link_values in self._slow_links.items():
            links[link].update(link_values)
        return GpuReading(
            gpu=self.identity, up=True, values=values, links=dict(links), xid_counts=dict(xid_counts), mig=mig
        )

    def running_pids(self) -> list[int]:
        """PIDs of the GPU's compute processes; in MIG mode those of its MIG devices, which, unlike the
        GPU's own list, need no privileges."""
        if self._mig is not None:
            return [pid for pids in self._mig.running_pids().values() for pid in pids]
        try:
            return [int(p.pid) for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)]
        except self._nvml.NVMLError:
            return []

    def mig_running_pids(self) -> dict[str, list[int]]:
        """MIG device UUID -> PIDs on it; {} outside MIG mode."""
        return self._mig.running_pids() if self._mig is not None else {}

    def free(self) -> None:
        for pair in (self._gpm, self._mig):
            if pair is not None:
                pair.free()

    # --- groups of calls; each fills `values` (catalog key -> native unit) and `links` ---

    def _utilization(self, values: dict[str, float], _: Links) -> None:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(self.handle)
        values["util_pct"], values["mem_copy_util_pct"] = float(rates.gpu), float(rates.memory)

    def _read_memory(self, values: dict[str, float], _: Links) -> None:
        used, total, reserved = self._memory.read_with_reserve(self.handle)
        values["fb_used_bytes"], values["fb_total_bytes"] = used, total
        if reserved is not None:
            values["fb_reserved_bytes"] = reserved
        self._fb_total = total

    def _video(self, values: dict[str, float], _: Links) -> None:
        # each returns [percent busy, the sampling period in µs it was averaged over]
        values["enc_util_pct"] = float(self._nvml.nvmlDeviceGetEncoderUtilization(self.handle)[0])
        values["dec_util_pct"] = float(self._nvml.nvmlDeviceGetDecoderUtilization(self.handle)[0])

    def _temperature(self, values: dict[str, float], _: Links) -> None:
        values["temp_c"] = float(self._nvml.nvmlDeviceGetTemperature(self.handle, self._nvml.NVML_TEMPERATURE_GPU))

    def _power(self, values: dict[str, float], _: Links) -> None:
        values["power_w"] = self._nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0  # mW

    def _energy(self, values: dict[str, float], _: Links) -> None:
        values["energy_j"] = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1000.0  # mJ

    def _clocks(self, values: dict[str, float], _: Links) -> None:
        nvml = self._nvml
        values["sm_clock_mhz"] = float(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_SM))
        values["mem_clock_mhz"] = float(nvml.nvmlDeviceGetClockInfo(self.handle, nvml.NVML_CLOCK_MEM))

    def _clock_events(self, values: dict[str, float], _: Links) -> None:
        values["clock_event_reasons"] = float(self._nvml.nvmlDeviceGetCurrentClocksEventReasons(self.handle))

    def _fields(self, values: dict[str, float], links: Links) -> None:
        """Memory temperature, PCIe byte counters, NVLink counters and the driver's recovery action in one
        call; each field has its own status, and one that is not supported is dropped from the request,
        not its neighbours."""
        if self._recovery.ask_again():
            self._build_requests()
        if not self._requests:
            return
        nvml = self._nvml
        fields = nvml_fields.decode(nvml, nvml.nvmlDeviceGetFieldValues(self.handle, self._requests))
        start, changed = 0, False
        if self._memory_temp_supported:
            if fields.status[0] == nvml.NVML_SUCCESS:
                values["mem_temp_c"] = float(fields.value[0])
            elif fields.status[0] == nvml.NVML_ERROR_NOT_SUPPORTED:
                self._memory_temp_supported, changed = False, True
            start = 1
        stop = start + len(self._pcie.requests())
        nvlink_stop = stop + (len(self._nvlink.requests()) if self._nvlink is not None else 0)
        if self._pcie.take(_slice(fields, start, stop), values):
            self._sample_pcie_on_the_thread()
            changed = True
        if self._nvlink is not None:
            changed |= self._nvlink.take(_slice(fields, stop, nvlink_stop), values, links)
        changed |= self._recovery.take(_slice(fields, nvlink_stop, len(self._requests)), values)
        if changed:
            self._build_requests()

    def _read_gpm(self, values: dict[str, float], _: Links) -> None:
        assert self._gpm is not None
        values.update(self._gpm.read())

    def _mig_mode(self, _values: dict[str, float], _links: Links) -> None:
        nvml = self._nvml
        current, _pending = nvml.nvmlDeviceGetMigMode(self.handle)
        enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
        if enabled != (self._mig is not None):
            log.info("%s: MIG mode %s", self._label, "on" if enabled else "off")
            self._guard.forget()  # what the GPU answers changes with the mode
            if self._mig is not None:
                self._mig.free()
            self._mig = (
                MigLayout(nvml, self.handle, self._label, self._log_once, self._memory, self._gpm_request)
                if enabled
                else None
            )
        if self._mig is not None:
            self._mig.discover(self._fb_total)

    def _power_limit(self, values: dict[str, float], _: Links) -> None:
        values["power_limit_w"] = self._nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0

    def _violation(self, values: dict[str, float], _: Links) -> None:
        nvml = self._nvml
        power = nvml.nvmlDeviceGetViolationStatus(self.handle, nvml.NVML_PERF_POLICY_POWER)
        thermal = nvml.nvmlDeviceGetViolationStatus(self.handle, nvml.NVML_PERF_POLICY_THERMAL)
        values["throttle_power_s"] = power.violationTime / NS_PER_S
        values["throttle_thermal_s"] = thermal.violationTime / NS_PER_S

    def _pcie_replay(self, values: dict[str, float], _: Links) -> None:
        values["pcie_replay"] = float(self._nvml.nvmlDeviceGetPcieReplayCounter(self.handle))

    def _ecc(self, values: dict[str, float], _: Links) -> None:
        nvml = self._nvml
        for key, kind in (
            ("ecc_corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("ecc_uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            values[key] = float(nvml.nvmlDeviceGetTotalEccErrors(self.handle, kind, nvml.NVML_VOLATILE_ECC))

    def _remapped_rows(self, values: dict[str, float], _: Links) -> None:
        correctable, uncorrectable, pending, failure = self._nvml.nvmlDeviceGetRemappedRows(self.handle)
        values["remapped_rows_correctable"] = float(correctable)
        values["remapped_rows_uncorrectable"] = float(uncorrectable)
        values["remap_pending"] = 1.0 if pending else 0.0
        values["remap_failure"] = 1.0 if failure else 0.0

    def _vgpu_license(self, values: dict[str, float], _: Links) -> None:
        """DCGM's vGPU license status: 0 outside a vGPU guest (bare metal, passthrough, the host)."""
        nvml = self._nvml
        if nvml.nvmlDeviceGetVirtualizationMode(self.handle) != nvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU:
            values["vgpu_licensed"] = 0.0
            return
        features = nvml.nvmlDeviceGetGridLicensableFeatures(self.handle)
        licensed = any(
            feature.featureCode == nvml.NVML_GRID_LICENSE_FEATURE_CODE_VGPU
            and feature.featureState == nvml.NVML_GRID_LICENSE_STATE_LICENSED
            for feature in features.gridLicensableFeatures[: features.licensableFeaturesCount]
        )
        values["vgpu_licensed"] = 1.0 if licensed else 0.0

    # --- set up once ---

    def _build_requests(self) -> None:
        nvml = self._nvml
        self._requests = [(nvml.NVML_FI_DEV_MEMORY_TEMP, 0)] if self._memory_temp_supported else []
        self._requests += self._pcie.requests()
        if self._nvlink is not None:
            self._requests += self._nvlink.requests()
        self._requests += self._recovery.requests()

    def _sample_pcie_on_the_thread(self) -> None:
        self._pcie.supported = False
        if not self._pcie_sampled:
            self._pcie_sampled = True
            self._pcie_thread.add(self.index, self.handle)

    def _link_count(self) -> int:
        nvml = self._nvml
        try:
            results = nvml.nvmlDeviceGetFieldValues(self.handle, [(nvml.NVML_FI_DEV_NVLINK_LINK_COUNT, 0)])
        except nvml.NVMLError:
            return 0
        fields = nvml_fields.decode(nvml, results)
        return int(fields.value[0]) if fields.status[0] == nvml.NVML_SUCCESS else 0

    def _gpm_metrics_request(self) -> Any | None:
        try:
            if self._nvml.nvmlGpmQueryDeviceSupport(self.handle).isSupportedDevice:
                return metrics_request(self._nvml)
        except (self._nvml.NVMLError, AttributeError):  # AttributeError: a binding older than GPM
            pass
        return None

    def _gpm_pair(self) -> GpmPair | None:
        if self._gpm_request is None:
            return None
        try:
            return GpmPair(self._nvml, self._gpm_request, lambda s: self._nvml.nvmlGpmSampleGet(self.handle, s))
        except self._nvml.NVMLError as exc:
            self._log_once((self._label, "gpm"), logging.INFO, "%s: GPM unavailable (%s)", self._label, exc)
            return None


def _serial(nvml: ModuleType, handle: Any) -> str:
    """The board's serial number; "" where NVML will not say (GeForce boards, some permissions)."""
    try:
        return text(nvml.nvmlDeviceGetSerial(handle))
    except nvml.NVMLError:
        return ""


def _slice(fields: Fields, start: int, stop: int) -> Fields:
    return Fields(
        fields.field_id[start:stop],
        fields.scope[start:stop],
        fields.status[start:stop],
        fields.value[start:stop],
        fields.timestamp_us[start:stop],
    )


def _memory_from_instances(mig: tuple[MigReading, ...], values: dict[str, float]) -> None:
    """Without privileges a MIG GPU will not tell its memory; its GPU instances will, and in MIG mode all
    memory in use is in an instance. The total is then what the instances hold, not the whole GPU."""
    used = [m.values["mig_fb_used_bytes"] for m in mig if "mig_fb_used_bytes" in m.values]
    total = [m.values["mig_fb_total_bytes"] for m in mig if "mig_fb_total_bytes" in m.values]
    if used:
        values["fb_used_bytes"] = sum(used)
    if total:
        values["fb_total_bytes"] = sum(total)
