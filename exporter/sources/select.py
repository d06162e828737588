"""Chooses the node's telemetry source from --backend: nvml, amdsmi, or auto (what the node has).

InfiniBand ports are added whenever the sysfs class directory exists. With an explicit backend a
missing library or driver is a start-up error; with auto it is a fallback to the next backend.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from gpuscope.exporter.sources.base import BackendUnavailable, Source
from gpuscope.exporter.sources.combined import CombinedSource
from gpuscope.exporter.sources.infiniband import DEFAULT_ROOT, InfinibandSource

log = logging.getLogger(__name__)


def _nvml() -> Source:
    from gpuscope.exporter.sources.nvml import NvmlSource

    return NvmlSource()


def _amdsmi() -> Source:
    from gpuscope.exporter.sources.amdsmi import AmdSmiSource

    return AmdSmiSource()


GPU_BACKENDS: dict[str, Callable[[], Source]] = {"nvml": _nvml, "amdsmi": _amdsmi}


def open_source(
    backend: str, ib_root: Path = DEFAULT_ROOT, gpu_backends: dict[str, Callable[[], Source]] | None = None
) -> Source:
    factories = gpu_backends or GPU_BACKENDS
    if backend != "auto" and backend not in factories:
        raise ValueError(f"unknown backend {backend!r}; one of auto, {', '.join(factories)}")
    gpu: Source | None = None
    if backend == "auto":
        for name, factory in factories.items():
            try:
                gpu = factory()
                break
            except BackendUnavailable as exc:
                log.info("auto: %s unavailable: %s", name, exc)
    else:
        gpu = factories[backend]()  # BackendUnavailable propagates: the operator asked for this one
    fabric = InfinibandSource(ib_root) if ib_root.is_dir() else None
    if fabric is not None and not fabric.ports:
        fabric = None  # the class directory exists (driver loaded) but no HCA is present
    if gpu is None and fabric is None:
        raise BackendUnavailable(
            "no GPU library answered (NVML: install the NVIDIA driver; AMD: install ROCm and amdsmi) "
            f"and there are no InfiniBand devices under {ib_root}; to try gpuscope without GPUs, "
            "use --backend sim (a simulated node)"
        )
    if gpu is None:
        log.warning("auto: no GPUs found; exporting InfiniBand ports only")
    source = CombinedSource(gpu, fabric)
    log.info("backend: %s", source.name)
    return source
