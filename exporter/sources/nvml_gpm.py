"""Engine, SM, tensor-pipe and DRAM activity from GPU Performance Monitoring (Hopper and later), what
DCGM's profiling fields report elsewhere: two samples of one GPU, or of one MIG GPU instance, make a
reading; the first sample only primes the pair."""

from __future__ import annotations

import logging
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuscope.exporter.sources.nvml_fields import layout

log = logging.getLogger(__name__)

# catalog key -> GPM metric (nvml.h NVML_GPM_METRIC_*), each a percentage
METRICS = (
    ("sm_active_pct", "NVML_GPM_METRIC_SM_UTIL"),
    ("tensor_active_pct", "NVML_GPM_METRIC_ANY_TENSOR_UTIL"),
    ("gr_engine_active_pct", "NVML_GPM_METRIC_GRAPHICS_UTIL"),
    ("dram_active_pct", "NVML_GPM_METRIC_DRAM_BW_UTIL"),
)
KEYS = tuple(key for key, _ in METRICS)


def metrics_request(nvml: ModuleType) -> Any:
    """One request, reused by every pair of a device: the structure holds room for every GPM metric and
    is costly to build. Pairs fill in their samples just before each call."""
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(METRICS)
    for slot, (_, metric) in zip(request.metrics, METRICS, strict=False):
        slot.metricId = getattr(nvml, metric)
    return request


class GpmPair:
    def __init__(self, nvml: ModuleType, request: Any, take_sample: Callable[[Any], object]) -> None:
        self._nvml = nvml
        self._request = request
        self._take_sample = take_sample  # e.g. nvmlGpmSampleGet(handle, sample)
        self._samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
        self._primed = False
        # The request's metric results, read in one unpack: each structure's attributes would be
        # decoded in Python, twice per metric and GPU every cycle.
        self._results = memoryview(request.metrics).cast("B")
        self._unpack = layout(nvml.c_nvmlGpmMetric_t, (("nvmlReturn", "I"), ("value", "d")), len(KEYS))

    def read(self) -> dict[str, float]:
        """Activity since the previous read, in percent; {} on the first read."""
        nvml = self._nvml
        previous, current = self._samples
        self._take_sample(current)
        out: dict[str, float] = {}
        if self._primed:
            request = self._request
            request.sample1, request.sample2 = previous, current
            nvml.nvmlGpmMetricsGet(request)
            results = self._unpack.unpack_from(self._results)
            success = nvml.NVML_SUCCESS
            for key, status, value in zip(KEYS, results[0::2], results[1::2], strict=True):
                if status == success:
                    out[key] = min(100.0, max(0.0, value))
        self._samples = [current, previous]
        self._primed = True
        return out

    def reset(self) -> None:
        """Start over: the GPU went away, so the older sample no longer pairs with the next."""
        self._primed = False

    def free(self) -> None:
        for sample in self._samples:
            try:
                self._nvml.nvmlGpmSampleFree(sample)
            except self._nvml.NVMLError as exc:
                log.debug("nvmlGpmSampleFree: %s", exc)
        self._samples = []
