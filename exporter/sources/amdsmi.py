"""AMD Instinct GPUs through amdsmi (ROCm), filling the same catalog as NVML where amdsmi has the value.

amdsmi marks a value it cannot give either by raising AmdSmiLibraryException(NOT_SUPPORTED) or by
returning "N/A" in a dict: both leave the metric out. XGMI links take NVLink's place in the per-link
metrics. A GPU is reported down only when the library answers a status that means it is gone
(amdsmi_status.GONE); a busy library is retried for a few ms a cycle, then the GPU's last values are
carried for that cycle. Each distinct error is logged once. Releases 6.2 to 7.0 differ in keys and
units (see exporter/testing/fake_amdsmi.py); each is read into the catalog's units. docs/amd.md.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, PortReading
from gpuscope.exporter.sources.amdsmi_loading import load_amdsmi, mismatch, one_line
from gpuscope.exporter.sources.amdsmi_partitions import partition_numbers, physical_bdf
from gpuscope.exporter.sources.amdsmi_status import (
    BUSY_BUDGET_S,
    BusyBudget,
    StatusCodes,
    StillBusy,
    answer,
    error_code,
)
from gpuscope.exporter.sources.base import BackendUnavailable
from gpuscope.exporter.sources.errors import GroupGuard, LogOnce

__all__ = ["BUSY_BUDGET_S", "AmdSmiSource", "load_amdsmi", "plausible_watts"]

log = logging.getLogger(__name__)

KB = 1024
SLOW_EVERY = 10
STARTUP_BUSY_BUDGET_S = 1.0  # reading the GPUs' identities once, at start, may wait longer
MAX_WATTS = 10_000.0  # above this no GPU's power is in W: it is hwmon's µW (amdsmi 6.2 and 6.3)
MIN_WATTS_FROM_MICROWATTS = 1.0  # a µW reading below 1 W is no real power limit either


class AmdSmiSource:
    name = "amdsmi"

    def __init__(self, amdsmi: ModuleType | None = None, *, sleep: Callable[[float], None] = time.sleep) -> None:
        self._smi = smi = amdsmi if amdsmi is not None else load_amdsmi()
        self._sleep = sleep
        try:
            library_error: type[Exception] = smi.AmdSmiException
            smi.amdsmi_init()
            handles = smi.amdsmi_get_processor_handles()
            codes = StatusCodes(smi)
        except Exception as exc:
            if not isinstance(exc, getattr(smi, "AmdSmiException", ())):
                raise BackendUnavailable(mismatch(exc)) from None  # not the library's own error: a misfit wrapper
            raise BackendUnavailable(f"amdsmi could not start: {one_line(exc)}. Is the amdgpu driver loaded?") from None
        if not handles:
            raise BackendUnavailable("amdsmi found no AMD GPUs")
        startup = BusyBudget(STARTUP_BUSY_BUDGET_S, sleep)
        try:
            bdfs = [str(answer(smi, codes, startup, smi.amdsmi_get_gpu_device_bdf, h)) for h in handles]
            partitions = partition_numbers(smi, handles, bdfs)
            self._log_once = LogOnce(log)
            self.devices = [
                _AmdDevice(smi, codes, i, h, bdf, partition, self._log_once, startup)
                for i, (h, bdf, partition) in enumerate(zip(handles, bdfs, partitions, strict=True))
            ]
        except (library_error, StillBusy) as exc:
            raise BackendUnavailable(f"amdsmi could not read the GPUs' identities: {one_line(exc)}") from None
        self._cycle = 0

    @property
    def gpus(self) -> tuple[GpuIdentity, ...]:
        return tuple(device.identity for device in self.devices)

    def read(self, now: float) -> tuple[tuple[GpuReading, ...], tuple[PortReading, ...]]:
        slow = self._cycle % SLOW_EVERY == 0
        self._cycle += 1
        budget = BusyBudget(BUSY_BUDGET_S, self._sleep)
        return tuple(device.read(slow, budget) for device in self.devices), ()

    def close(self) -> None:
        try:
            self._smi.amdsmi_shut_down()
        except self._smi.AmdSmiException as exc:
            log.debug("amdsmi_shut_down: %s", exc)


class _AmdDevice:
    def __init__(
        self,
        smi: ModuleType,
        codes: StatusCodes,
        index: int,
        handle: Any,
        bdf: str,
        partition: int | None,
        log_once: LogOnce,
        startup: BusyBudget,
    ) -> None:
        self._smi, self._codes, self.index, self.handle = smi, codes, index, handle
        self.partition = partition  # None: a whole GPU; else this handle's partition of the GPU at bdf
        # A partition shares its GPU's power, energy, sensors, XGMI links and error counters; only
        # partition 0 reports them, so a node's power or XGMI total counts each GPU once.
        self.reads_device_wide = partition in (None, 0)
        self.lost = False
        self._log_once = log_once
        self._budget, self._busy = startup, False  # this cycle's retry budget; whether a call stayed busy
        self._slow: dict[str, float] = {}
        self._last: tuple[dict[str, float], dict[int, dict[str, float]]] = ({}, {})
        uuid = str(answer(smi, codes, startup, smi.amdsmi_get_gpu_device_uuid, handle))
        asic = answer(smi, codes, startup, smi.amdsmi_get_gpu_asic_info, handle)
        board = self._board_info(handle)
        self.identity = GpuIdentity(
            index=index,
            # The library gives every partition its GPU's UUID (made from the ASIC serial), so a
            # partition's is suffixed to keep readings apart. TODO(snapshot): a partition field.
            uuid=uuid if partition is None else f"{uuid}:p{partition}",
            model=str(asic.get("market_name", "AMD GPU")),
            pci_bus_id=bdf if partition is None else physical_bdf(bdf),
            serial=_known(board.get("product_serial")),
            part_number=_known(board.get("model_number")),
        )
        self.label = f"GPU {index} ({self.identity.model})"
        self._guard = GroupGuard(
            self.label,
            log_once,
            errors=smi.AmdSmiLibraryException,
            is_unsupported=lambda exc: error_code(exc) in codes.unsupported,
            passthrough=(StillBusy,),
        )

    def read(self, slow: bool, budget: BusyBudget) -> GpuReading:
        smi, h = self._smi, self.handle
        values: dict[str, float] = {}
        links: dict[int, dict[str, float]] = defaultdict(dict)
        self._budget, self._busy = budget, False
        try:
            activity = answer(smi, self._codes, budget, smi.amdsmi_get_gpu_activity, h)
        except StillBusy:
            self._busy, activity = True, {}
        except smi.AmdSmiLibraryException as exc:
            if error_code(exc) in self._codes.gone:
                return self._down(exc)
            self._activity_failed(exc)
            activity = {}
        if self.lost:
            log.warning("GPU %d (%s) answers again", self.index, self.identity.uuid)
            self.lost = False
        _put(values, "util_pct", activity.get("gfx_activity"))
        _put(values, "mem_copy_util_pct", activity.get("umc_activity"))
        self._run("clocks", lambda: self._clocks(values))
        self._run("memory", lambda: self._memory(values))
        if self.reads_device_wide:
            self._read_device_wide(values, links, slow)
        values.update(self._slow)
        if self._busy:  # what the busy library did not answer this cycle, as it was last cycle
            values, links = {**self._last[0], **values}, {**self._last[1], **links}
            self._log_once(
                (self.label, "busy"),
                logging.INFO,
                "%s: amdsmi stayed busy (another process holding its lock?); last values carried for the cycle",
                self.label,
            )
        self._last = (values, dict(links))
        return GpuReading(gpu=self.identity, up=True, values=values, links=dict(links))

    def _read_device_wide(self, values: dict[str, float], links: dict[int, dict[str, float]], slow: bool) -> None:
        self._run("power", lambda: self._power(values))
        self._run("energy", lambda: self._energy(values))
        self._run("temperature", lambda: self._temperature(values, "temp_c", "HOTSPOT"))
        self._run("memory_temperature", lambda: self._temperature(values, "mem_temp_c", "VRAM"))
        self._run("xgmi", lambda: self._xgmi(values, links))
        if slow:
            fresh: dict[str, float] = {}
            self._run("ecc", lambda: self._ecc(fresh))
            self._run("pcie_replay", lambda: self._pcie_replay(fresh))
            self._slow = {**self._slow, **fresh} if self._busy else fresh

    def _board_info(self, handle: Any) -> dict[str, Any]:
        """Serial and part number; a board that will not say (some partitions, older ROCm) has none."""
        try:
            return dict(self._smi.amdsmi_get_gpu_board_info(handle))
        except self._smi.AmdSmiLibraryException as exc:
            self._log_once(("board", self.index), logging.INFO, "GPU %d: no board info (%s)", self.index, exc)
            return {}

    def _run(self, group: str, read: Callable[[], None]) -> None:
        try:
            self._guard.run(group, answer, self._smi, self._codes, self._budget, read)
        except StillBusy:
            self._busy = True

    def _down(self, exc: Exception) -> GpuReading:
        if not self.lost:
            log.error("GPU %d (%s) is gone (%s); reporting it down", self.index, self.identity.uuid, one_line(exc))
        self.lost = True
        return GpuReading(gpu=self.identity, up=False)

    def _activity_failed(self, exc: Exception) -> None:
        """Not gone: the GPU is still up, without its utilisation this cycle."""
        code = error_code(exc)
        if code in self._codes.unsupported:
            level, what = logging.INFO, "activity not supported (or the GPU is resetting); utilisation left out"
        else:
            level, what = logging.WARNING, f"reading activity failed: {one_line(exc)}"
        self._log_once((self.label, "activity", code), level, "%s: %s", self.label, what)

    def _power(self, values: dict[str, float]) -> None:
        info = self._smi.amdsmi_get_power_info(self.handle)
        for key in ("socket_power", "current_socket_power", "average_socket_power"):
            watts = plausible_watts(info.get(key))
            if watts is not None:
                values["power_w"] = watts
                break
        limit = plausible_watts(info.get("power_limit"))
        if limit is not None:
            values["power_limit_w"] = limit

    def _energy(self, values: dict[str, float]) -> None:
        energy = self._smi.amdsmi_get_energy_count(self.handle)
        # The accumulator is 'energy_accumulator' from 6.3; 6.2 named it 'power' (6.3 has both).
        raw = energy["energy_accumulator"] if "energy_accumulator" in energy else energy.get("power")
        accumulator, resolution = _number(raw), _number(energy.get("counter_resolution"))
        if accumulator is not None and resolution is not None:
            values["energy_j"] = accumulator * resolution / 1e6  # µJ

    def _temperature(self, values: dict[str, float], key: str, sensor: str) -> None:
        smi = self._smi
        kind, current = getattr(smi.AmdSmiTemperatureType, sensor), smi.AmdSmiTemperatureMetric.CURRENT
        _put(values, key, smi.amdsmi_get_temp_metric(self.handle, kind, current))

    def _clocks(self, values: dict[str, float]) -> None:
        smi = self._smi
        _put(values, "sm_clock_mhz", smi.amdsmi_get_clock_info(self.handle, smi.AmdSmiClkType.GFX).get("clk"))
        _put(values, "mem_clock_mhz", smi.amdsmi_get_clock_info(self.handle, smi.AmdSmiClkType.MEM).get("clk"))

    def _memory(self, values: dict[str, float]) -> None:
        smi = self._smi
        _put(values, "fb_total_bytes", smi.amdsmi_get_gpu_memory_total(self.handle, smi.AmdSmiMemoryType.VRAM))
        _put(values, "fb_used_bytes", smi.amdsmi_get_gpu_memory_usage(self.handle, smi.AmdSmiMemoryType.VRAM))

    def _ecc(self, values: dict[str, float]) -> None:
        counts = self._smi.amdsmi_get_gpu_total_ecc_count(self.handle)
        _put(values, "ecc_corrected", counts.get("correctable_count"))
        _put(values, "ecc_uncorrected", counts.get("uncorrectable_count"))

    def _pcie_replay(self, values: dict[str, float]) -> None:
        _put(values, "pcie_replay", self._smi.amdsmi_get_gpu_pci_replay_counter(self.handle))

    def _xgmi(self, values: dict[str, float], links: dict[int, dict[str, float]]) -> None:
        counters = self._xgmi_kb()
        if not counters:
            return
        tx = rx = 0.0
        for i, written, read in counters:
            if written is not None:
                links[i]["link_tx_bytes"] = written * KB
                tx += written * KB
            if read is not None:
                links[i]["link_rx_bytes"] = read * KB
                rx += read * KB
        values["nvlink_tx_bytes"], values["nvlink_rx_bytes"] = tx, rx

    def _xgmi_kb(self) -> list[tuple[int, float | None, float | None]]:
        """(link, KB written, KB read) per XGMI link."""
        smi = self._smi
        if hasattr(smi, "amdsmi_get_link_metrics"):
            metrics = smi.amdsmi_get_link_metrics(self.handle)
            count = int(_number(metrics.get("num_links")) or 0)
            pairs = [(link.get("write"), link.get("read")) for link in metrics.get("links", [])[:count]]
        else:  # not in the Python package before 6.4; gpu_metrics has the same KB counters
            metrics = smi.amdsmi_get_gpu_metrics_info(self.handle)
            written, read = metrics.get("xgmi_write_data_acc", []), metrics.get("xgmi_read_data_acc", [])
            pairs = list(zip(written, read, strict=False))
        counters = [(i, _number(tx), _number(rx)) for i, (tx, rx) in enumerate(pairs)]
        return [(i, tx, rx) for i, tx, rx in counters if tx is not None or rx is not None]


def plausible_watts(raw: Any) -> float | None:
    """A power reading in W, whichever unit the library used. Up to MAX_WATTS (10 kW) it is W; above, it
    is µW (amdsmi 6.2 and 6.3 give the power limit as hwmon's power1_cap: an MI300X's 750 W reads
    750000000), kept only if it is then 1 W to 10 kW. Anything else is no GPU's and is left out."""
    number = _number(raw)
    if number is None or number < 0:
        return None
    if number <= MAX_WATTS:
        return number
    watts = number / 1e6
    return watts if MIN_WATTS_FROM_MICROWATTS <= watts <= MAX_WATTS else None


def _known(value: Any) -> str:
    """amdsmi writes "N/A" for what a board does not report."""
    text = str(value or "").strip()
    return "" if text in ("", "N/A") else text


def _number(value: Any) -> float | None:
    """amdsmi's values: numbers, or "N/A" for what the GPU does not report."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _put(values: dict[str, float], key: str, raw: Any) -> None:
    number = _number(raw)
    if number is not None:
        values[key] = number
