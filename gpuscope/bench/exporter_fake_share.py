"""The fake NVML's share of a sampling cycle's CPU, so that the exporter bench charges the exporter only
for its own code.

The fake (exporter/testing/fake_nvml.py) stands in for the pynvml binding and the driver, in Python:
per call it resolves the handle, builds the answer (ctypes structures, a numpy-filled field array) and
counts the call. That is about half of what a cycle measures, and none of it is the exporter's code. So
the calls one sampling period makes (SLOW_EVERY cycles: fast and slow groups alike) are recorded, with
their arguments, on the sampling thread, and replayed on their own against the same fake: that CPU per
cycle is the fake's share, measured in the same run as the cycle. The replay runs the fake's code hot,
in a tight loop, so if anything it reads a little low, and the exporter is charged a little more than
its own share, never less.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sources.nvml import SLOW_EVERY

Call = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]


def fake_cpu_ms_per_cycle(fake: ModuleType, sampler: Sampler, periods: int = 100) -> float:
    """CPU milliseconds the fake spends answering one average cycle of `sampler` (already warm)."""
    calls = _record(fake, sampler, SLOW_EVERY)
    errors = fake.NVMLError
    started = time.process_time()
    for _ in range(periods):
        for function, args, kwargs in calls:
            try:  # noqa: SIM105 -- a try costs nothing unless it raises; contextlib.suppress would be charged to the fake
                function(*args, **kwargs)
            except errors:  # answered with an error in the cycle too: raising it is the fake's work
                pass
    return (time.process_time() - started) * 1000 / (periods * SLOW_EVERY)


def _record(fake: ModuleType, sampler: Sampler, cycles: int) -> list[Call]:
    """The fake's functions called by `cycles` cycles, in order; other threads' calls (the XID listener's
    waits, the PCIe thread's passes) are not the cycle's and are left out."""
    calls: list[Call] = []
    sampling_thread = threading.get_ident()
    originals = {
        name: value
        for name, value in vars(fake).items()
        if name.startswith("nvml") and callable(value) and not isinstance(value, type)
    }

    def recording(function: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == sampling_thread:
                calls.append((function, args, kwargs))
            return function(*args, **kwargs)

        return call

    for name, function in originals.items():
        setattr(fake, name, recording(function))
    try:
        for _ in range(cycles):
            sampler.sample_once()
    finally:
        for name, function in originals.items():
            setattr(fake, name, function)
    return calls
