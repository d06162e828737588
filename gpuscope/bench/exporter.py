"""Exporter cost: CPU and wall time per sampling cycle (8 H100s with NVLink through the fake NVML, which
keeps the driver's timings, plus 8 IB ports from a sysfs tree), and /metrics latency over real HTTP from
a separate client process, as Prometheus would scrape it.

The GPUs are those of a node whose driver predates the PCIe byte counters (R555): the costlier case,
where PCIe throughput comes from nvmlDeviceGetPcieThroughput, which samples for 20 ms per call (the
fake sleeps as the driver does). The exporter makes those calls on a thread of its own, one pass of
8 GPUs x 2 calls at most every PCIe period (5 s). In the tight loop measured here cycles come far faster
than passes, so a pass is measured on its own and its CPU added to the cycle's in the share production
has at the 1 s interval the CPU target assumes. The same loop on a driver with the byte counters is
reported beside it.

What is charged to the exporter: the fake NVML is Python standing in for the binding and the driver, and
about half of a cycle's CPU is spent inside it (exporter_fake_share.py measures that share in the same
run, by replaying the cycle's recorded calls against the fake alone). The CPU target is about the
exporter's own code, so `cpu_ms_per_cycle` (and the `pcie_counters_` and `k8s_` figures) are the measured
CPU less the fake's share; `measured_cpu_ms_per_cycle` is everything the process spent, fake included,
and `fake_nvml_cpu_ms_per_cycle` the difference. The PCIe pass's CPU (the fake's calls and sleeps, on
the PCIe thread) stays charged in full. On a real node the binding's Python wrappers and the driver's
ioctls take the fake's place: their cost is not zero, but it is not the exporter's code either.

For the scrape figures the exporter samples every 100 ms (ten times the 1 s the CPU target assumes,
so sampling overlaps scrapes far more often than in production) and the client waits a little longer
than that between scrapes, so every scrape renders a snapshot not rendered before: the realistic case,
as Prometheus scrapes less often than the exporter samples."""

from __future__ import annotations

import http.client
import multiprocessing
import statistics
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from gpuscope.bench import exporter_k8s
from gpuscope.bench.exporter_fake_share import fake_cpu_ms_per_cycle
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sources.combined import CombinedSource
from gpuscope.exporter.sources.infiniband import InfinibandSource
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from gpuscope.exporter.testing.fake_sysfs import write_infiniband_tree

GPUS = 8
PORTS = 8
PCIE_PASSES = 20
INTERVAL_S = 1.0  # the sampling interval the CPU target is stated for


def run(cycles: int = 3000, scrapes: int = 400) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-ib-") as tmp:
        ib_root = write_infiniband_tree(Path(tmp), devices=PORTS)
        nvml, source = _source(ib_root)
        try:
            cycle = _sampling_cost(Sampler(source, interval=INTERVAL_S), cycles)
            pcie = _pcie_pass_cost(nvml)
            passes_per_cycle = min(1.0, INTERVAL_S / nvml.pcie.period_s)
        finally:
            source.close()
        _, source = _source(ib_root, byte_counters=True)
        try:
            with_counters = _sampling_cost(Sampler(source, interval=INTERVAL_S), cycles)
        finally:
            source.close()
        _, source = _source(ib_root)
        try:
            uuids = [r.gpu.uuid for r in source.read(time.time())[0]]
            k8s = exporter_k8s.measure(
                lambda jobs: Sampler(source, INTERVAL_S, jobs=jobs), uuids, cycles, _sampling_cost
            )
        finally:
            source.close()
        scrape = _scrape_latency(ib_root, scrapes)
    pcie_share = pcie["pcie_pass_cpu_ms"] * passes_per_cycle
    return {
        "gpus": GPUS,
        "ports": PORTS,
        "cpu_ms_per_cycle": round(cycle["cpu_ms_per_cycle"] + pcie_share, 3),  # the exporter's own: the target
        "measured_cpu_ms_per_cycle": round(cycle["measured_cpu_ms_per_cycle"] + pcie_share, 3),
        "fake_nvml_cpu_ms_per_cycle": cycle["fake_nvml_cpu_ms_per_cycle"],
        "sampling_cpu_ms_per_cycle": cycle["cpu_ms_per_cycle"],
        **{k: v for k, v in cycle.items() if not k.endswith("cpu_ms_per_cycle")},
        **pcie,
        "pcie_passes_per_cycle": passes_per_cycle,
        "pcie_counters_cpu_ms_per_cycle": with_counters["cpu_ms_per_cycle"],
        "pcie_counters_measured_cpu_ms_per_cycle": with_counters["measured_cpu_ms_per_cycle"],
        "pcie_counters_cycle_wall_ms_p99": with_counters["cycle_wall_ms_p99"],
        **scrape,
        # the same cycle with Kubernetes attribution on: its listener's poll (once a cycle) counted in
        "k8s_cpu_ms_per_cycle": round(k8s["k8s_sampling_cpu_ms_per_cycle"] + k8s["k8s_poll_cpu_ms"] + pcie_share, 3),
        **k8s,
    }


def _source(ib_root: Path, byte_counters: bool = False) -> tuple[NvmlSource, CombinedSource]:
    gpus = h100_node(GPUS)
    if not byte_counters:
        for gpu in gpus:
            gpu.unsupported.add("pcie_counters")  # a driver older than R555
    nvml = NvmlSource(make_fake_pynvml(gpus))
    return nvml, CombinedSource(nvml, InfinibandSource(ib_root))


def _sampling_cost(sampler: Sampler, cycles: int) -> dict[str, Any]:
    for _ in range(50):  # warm caches, the GPM sample pair and the PCIe thread
        sampler.sample_once()
    wall = []
    cpu_start = time.process_time()  # every thread of the process: the PCIe and XID threads count too
    for _ in range(cycles):
        started = time.perf_counter()
        sampler.sample_once()
        wall.append(time.perf_counter() - started)
    cpu_ms = (time.process_time() - cpu_start) * 1000 / cycles
    nvml = sampler.source.parts[0] if isinstance(sampler.source, CombinedSource) else sampler.source
    fake_ms = fake_cpu_ms_per_cycle(nvml._nvml, sampler) if isinstance(nvml, NvmlSource) else 0.0
    return {
        "cycles": cycles,
        "cpu_ms_per_cycle": round(cpu_ms - fake_ms, 3),  # the exporter's own code (module docstring)
        "measured_cpu_ms_per_cycle": round(cpu_ms, 3),
        "fake_nvml_cpu_ms_per_cycle": round(fake_ms, 3),
        "cycle_wall_ms_p50": round(statistics.median(wall) * 1000, 3),
        "cycle_wall_ms_p99": round(_p99(wall) * 1000, 3),
    }


def _pcie_pass_cost(nvml: NvmlSource) -> dict[str, Any]:
    """One pass of the PCIe thread (2 x 20 ms per GPU, in the driver), timed on this thread while the
    PCIe thread is idle: no cycle asks it for another pass."""
    time.sleep(0.5)  # let a pass the last cycles asked for finish
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(PCIE_PASSES):
        nvml.pcie.sample_once()
    return {
        "pcie_pass_cpu_ms": round((time.process_time() - cpu_start) * 1000 / PCIE_PASSES, 3),
        "pcie_pass_wall_ms": round((time.perf_counter() - wall_start) * 1000 / PCIE_PASSES, 3),
    }


def _serve(ib_root: Path, interval: float, ready: Connection) -> None:
    """The exporter process: a sampling loop and the HTTP server, until terminated."""
    exporter = NodeExporter(
        _source(ib_root)[1], ExporterConfig("bench", "r0", "n0", interval=interval, listen="127.0.0.1:0")
    )
    exporter.start()
    while exporter.sampler.latest is None:
        time.sleep(0.01)
    ready.send(exporter.address)
    threading.Event().wait()


def _scrape_latency(ib_root: Path, scrapes: int, interval: float = 0.1) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    server = context.Process(target=_serve, args=(ib_root, interval, child), daemon=True)
    server.start()
    try:
        if not parent.poll(60):
            raise RuntimeError("the exporter process did not start")
        host, port = parent.recv()
        connection = http.client.HTTPConnection(host, port, timeout=10)
        latencies, size = _timed_gets(connection, "/metrics", scrapes, interval)
        # The same server's trivial endpoint under the same pacing: the HTTP stack's and the
        # scheduler's share of a scrape, measured in the same run.
        baseline, _ = _timed_gets(connection, "/healthz", scrapes // 2, interval)
        connection.close()
    finally:
        server.terminate()
        server.join(10)
    return {
        "scrapes": scrapes,
        "scrape_sampling_interval_s": interval,
        "scrape_p50_ms": round(statistics.median(latencies) * 1000, 3),
        "scrape_p99_ms": round(_p99(latencies) * 1000, 3),
        "healthz_p50_ms": round(statistics.median(baseline) * 1000, 3),
        "healthz_p99_ms": round(_p99(baseline) * 1000, 3),
        "metrics_bytes": size,
    }


def _timed_gets(
    connection: http.client.HTTPConnection, path: str, count: int, interval: float
) -> tuple[list[float], int]:
    latencies = []
    size = 0
    for _ in range(count):
        time.sleep(interval * 1.1)  # let a new snapshot arrive: each scrape renders afresh
        started = time.perf_counter()
        connection.request("GET", path, headers={"Accept": "text/plain"})
        response = connection.getresponse()
        size = len(response.read())
        latencies.append(time.perf_counter() - started)
        if response.status != 200:
            raise RuntimeError(f"{path} answered {response.status}")
    return latencies, size


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98]
