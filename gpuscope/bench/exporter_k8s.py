"""What Kubernetes attribution costs the exporter: a kubelet stand-in (a real gRPC server on a unix socket,
in a process of its own so that its CPU is not counted as ours) serves the pod-resources v1 List of a busy
node, 8 GPU pods among 60, and the exporter's own listener asks it.

- `k8s_poll_cpu_ms`, `k8s_poll_wall_ms`: one List as the listener makes it once a sampling cycle, on its
  own thread: the usual poll, whose answer is the last one again (decoded only when it changed).
- `k8s_cpu_ms_per_cycle`: the sampling cycle with Kubernetes attribution (its assign() reads the table)
  plus one poll: what a cycle costs at the 1 s interval the CPU target assumes.
- `k8s_cycle_wall_ms_p99`: the cycle's wall time while the listener polls as fast as the kubelet answers
  (far more often than once a cycle), to show that the sampling path never waits for it.
"""

from __future__ import annotations

import multiprocessing
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc

from gpuscope.exporter.jobs.kubernetes import KubernetesJobs
from gpuscope.exporter.jobs.podresources_wire import LIST, Container, PodResources, encode_list
from gpuscope.exporter.sampler import Sampler

POLLS = 300
OTHER_PODS = 52  # a busy GPU node: daemons, sidecars, CPU jobs besides the 8 GPU pods


def measure(sampler_for: Callable[[KubernetesJobs], Sampler], uuids: list[str], cycles: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-k8s-") as tmp:
        socket = Path(tmp) / "kubelet.sock"
        parent, child = context.Pipe()
        server = context.Process(target=_serve, args=(str(socket), uuids, child), daemon=True)
        server.start()
        try:
            if not parent.poll(60):
                raise RuntimeError("the kubelet stand-in did not start")
            parent.recv()
            return _measure(socket, sampler_for, len(uuids), cycles)
        finally:
            server.terminate()
            server.join(10)


def _measure(socket: Path, sampler_for: Callable[[KubernetesJobs], Sampler], gpus: int, cycles: int) -> dict[str, Any]:
    jobs = KubernetesJobs(socket, None, interval=1.0)
    try:
        jobs.poll_once()
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        for _ in range(POLLS):
            jobs.poll_once()
        poll_cpu_ms = (time.process_time() - cpu_start) * 1000 / POLLS
        poll_wall_ms = (time.perf_counter() - wall_start) * 1000 / POLLS
        sampler = sampler_for(jobs)
        for _ in range(50):
            sampler.sample_once()
        attributed = len(sampler.sample_once().jobs or {})
        if attributed != gpus:
            raise RuntimeError(f"the listener attributed {attributed} of {gpus} GPUs")
        cpu_start = time.process_time()
        for _ in range(cycles):
            sampler.sample_once()
        cycle_cpu_ms = (time.process_time() - cpu_start) * 1000 / cycles
        wall = _cycles_while_polling(jobs, sampler, cycles)
    finally:
        jobs.close()
    return {
        "k8s_pods": gpus + OTHER_PODS,
        "k8s_poll_cpu_ms": round(poll_cpu_ms, 3),
        "k8s_poll_wall_ms": round(poll_wall_ms, 3),
        "k8s_sampling_cpu_ms_per_cycle": round(cycle_cpu_ms, 3),
        "k8s_cycle_wall_ms_p50": round(statistics.median(wall) * 1000, 3),
        "k8s_cycle_wall_ms_p99": round(statistics.quantiles(wall, n=100)[98] * 1000, 3),
        "_k8s_cycle_and_poll_cpu_ms": cycle_cpu_ms + poll_cpu_ms,  # the caller adds the PCIe share
    }


def _cycles_while_polling(jobs: KubernetesJobs, sampler: Sampler, cycles: int) -> list[float]:
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            jobs.poll_once()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    wall = []
    try:
        for _ in range(cycles):
            started = time.perf_counter()
            sampler.sample_once()
            wall.append(time.perf_counter() - started)
    finally:
        stop.set()
        thread.join(10)
    return wall


def _serve(socket: str, uuids: list[str], ready: Connection) -> None:
    """The kubelet stand-in: List answers the same node every time, until terminated."""
    pods = [
        PodResources(f"train-{n}", "ml", (Container("trainer", (("nvidia.com/gpu", (uuid,)),), ()),))
        for n, uuid in enumerate(uuids)
    ]
    pods += [PodResources(f"daemon-{n}", "kube-system", (Container("c", (), ()),)) for n in range(OTHER_PODS)]
    answer = encode_list(pods)
    service, method = LIST.strip("/").split("/")
    handler = grpc.method_handlers_generic_handler(
        service, {method: grpc.unary_unary_rpc_method_handler(lambda request, context: answer)}
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2), handlers=(handler,))
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    ready.send(True)
    threading.Event().wait()
