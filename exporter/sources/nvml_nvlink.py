"""NVLink: per-link data counters and error counters, and the GPU totals built from them.

Support is decided per field, not per group: Hopper answers NOT_SUPPORTED for the CRC-data error
counter on every link (DCGM issue #173) while flit CRC, replay, recovery and ECC-data counters work.
A passing failure drops that link's value for the cycle, never a counter for good.

GPU totals must never go backwards (Prometheus would read a counter reset): throughput totals are
NVML's own sums over all links (scopeId UINT_MAX), and where a driver lacks those, and for the error
counters, the sum of each link's last known count.
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from gpuscope.exporter.sources.errors import LogOnce
from gpuscope.exporter.sources.nvml_fields import UINT_MAX, Fields

Links = dict[int, dict[str, float]]
KIB = 1024.0


class NvlinkThroughput:
    """Data transmitted and received, per link and in total, from the cycle's field-values call."""

    def __init__(self, nvml: ModuleType, link_count: int) -> None:
        self._nvml = nvml
        tx, rx = nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
        self._link_keys = {tx: "link_tx_bytes", rx: "link_rx_bytes"}
        self._total_keys = {tx: "nvlink_tx_bytes", rx: "nvlink_rx_bytes"}
        self._requests = [(field, link) for link in range(link_count) for field in (tx, rx)]
        self._requests += [(tx, UINT_MAX), (rx, UINT_MAX)]
        self._aggregated = {tx, rx}  # fields whose total NVML sums for us
        self._totals: dict[int, float] = {}  # field -> NVML's last total, in bytes
        self._link_last: dict[tuple[int, int], float] = {}  # (field, link) -> last bytes, for the other totals

    def requests(self) -> list[tuple[int, int]]:
        return self._requests

    def take(self, fields: Fields, values: dict[str, float], links: Links) -> bool:
        """Fills per-link and total bytes; True when a field turned out unsupported (requests changed)."""
        nvml = self._nvml
        success = nvml.NVML_SUCCESS
        status = fields.status
        changed = False
        if status.count(success) != len(status):
            not_supported = nvml.NVML_ERROR_NOT_SUPPORTED
            dropped = {
                (field, scope)
                for field, scope, code in zip(fields.field_id, fields.scope, status, strict=True)
                if code == not_supported
            }
            if dropped:
                self._requests = [r for r in self._requests if r not in dropped]
                self._aggregated -= {field for field, scope in dropped if scope == UINT_MAX}
                changed = True
        link_keys, aggregated, totals, link_last = self._link_keys, self._aggregated, self._totals, self._link_last
        for field, scope, code, count in zip(fields.field_id, fields.scope, status, fields.value, strict=True):
            if code != success:
                continue
            value = count * KIB
            if scope == UINT_MAX:
                totals[field] = value
            else:
                links[scope][link_keys[field]] = value
                if field not in aggregated:
                    link_last[field, scope] = value
        for field, key in self._total_keys.items():
            if field in aggregated:
                total = totals.get(field)  # through a passing failure, NVML's previous total
            else:
                counts = [value for (f, _), value in link_last.items() if f == field]
                total = sum(counts) if counts else None
            if total is not None:
                values[key] = total
        return changed


# Per-link key -> the NVML counters it adds up.
ERROR_KEYS: dict[str, tuple[str, ...]] = {
    "link_crc_errors": ("NVML_NVLINK_ERROR_DL_CRC_FLIT", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
    "link_replay_errors": ("NVML_NVLINK_ERROR_DL_REPLAY",),
    "link_recovery_errors": ("NVML_NVLINK_ERROR_DL_RECOVERY",),
    "link_ecc_errors": ("NVML_NVLINK_ERROR_DL_ECC_DATA",),
}
# GPU total -> the NVML counters it adds up over all links. ECC data has no GPU-wide column in the
# collector, so it stays per link; flit and data CRC apart are served on /metrics only (dcgm-exporter
# counts them apart; the collector stores their sum).
ERROR_TOTALS: dict[str, tuple[str, ...]] = {
    "nvlink_crc_errors": ERROR_KEYS["link_crc_errors"],
    "nvlink_replay_errors": ERROR_KEYS["link_replay_errors"],
    "nvlink_recovery_errors": ERROR_KEYS["link_recovery_errors"],
    "nvlink_crc_flit_errors": ("NVML_NVLINK_ERROR_DL_CRC_FLIT",),
    "nvlink_crc_data_errors": ("NVML_NVLINK_ERROR_DL_CRC_DATA",),
}


class NvlinkErrors:
    """Error counters per link (nvmlDeviceGetNvLinkErrorCounter), read on the slow cadence."""

    def __init__(self, nvml: ModuleType, handle: Any, link_count: int, label: str, log_once: LogOnce) -> None:
        self._nvml = nvml
        self._handle = handle
        self._link_count = link_count
        self._label = label
        self._log_once = log_once
        self._kinds = {key: [getattr(nvml, name) for name in names] for key, names in ERROR_KEYS.items()}
        self._totals = {key: {getattr(nvml, name) for name in names} for key, names in ERROR_TOTALS.items()}
        self._names = {
            getattr(nvml, name): name.removeprefix("NVML_NVLINK_ERROR_DL_")
            for names in ERROR_KEYS.values()
            for name in names
        }
        self._unsupported: set[tuple[int, int]] = set()  # (link, counter)
        self._last: dict[tuple[int, int], float] = {}  # (link, counter) -> last count read

    def read(self, values: dict[str, float], links: Links) -> None:
        unsupported = self._unsupported
        for link in range(self._link_count):
            for key, kinds in self._kinds.items():
                total, complete, supported = 0.0, True, False
                for kind in kinds:
                    if (link, kind) in unsupported:
                        continue
                    count = self._count(link, kind)
                    if (link, kind) in unsupported:  # it just said so
                        continue
                    supported = True
                    if count is None:
                        complete = False
                    else:
                        total += count
                if supported and complete:
                    links[link][key] = total
        by_kind: dict[int, float] = {}
        for (_, kind), count in self._last.items():
            by_kind[kind] = by_kind.get(kind, 0.0) + count
        for total_key, counted in self._totals.items():
            known = [by_kind[kind] for kind in counted if kind in by_kind]
            if known:
                values[total_key] = float(sum(known))

    def _count(self, link: int, kind: int) -> float | None:
        """The counter's value now; None when it could not be read (its last value stays in the totals)."""
        nvml = self._nvml
        try:
            count = float(nvml.nvmlDeviceGetNvLinkErrorCounter(self._handle, link, kind))
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NoPermission) as exc:
            self._unsupported.add((link, kind))
            self._log_once(
                (self._label, "nvlink_error", kind, str(exc)),
                logging.INFO,
                "%s: NVLink %s error counter not available (%s); left out",
                self._label,
                self._names[kind],
                exc,
            )
            return None
        except nvml.NVMLError_GpuIsLost:
            raise
        except nvml.NVMLError as exc:
            self._log_once(
                (self._label, "nvlink_error", kind, str(exc)),
                logging.WARNING,
                "%s: reading NVLink %s error counter failed: %s",
                self._label,
                self._names[kind],
                exc,
            )
            return None
        self._last[link, kind] = count
        return count
