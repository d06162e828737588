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
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import grpc

from gpuscope.exporter.jobs.kubernetes import KubernetesJobs
from gpuscope.exporter.jobs.podresources_wire import LIST, Container, PodResources, encode_list
from gpuscope.exporter.sampler import Sampler

POLLS = 300
OTHER_PODS = 52  # a busy GPU node: daemons, sidecars, CPU jobs besides the 8 GPU pods


def measure(
    sampler_for: Callable[[KubernetesJobs], Sampler],
    uuids: list[str],
    cycles: int,
    sampling_cost: Callable[[Sampler, int], dict[str, Any]],
) -> dict[str, Any]:
    """The figures above; `sampling_cost(sampler, cycles)` times the cycles as the rest of the bench does."""
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-k8s-") as tmp:
        socket = Path(tmp) / "kubelet.sock"
        parent, child = context.Pipe()
        server = context.Process(target=_serve, args=(str(socket), uuids, child), daemon=True)
        server.start()
        jobs = KubernetesJobs(socket, None, interval=1.0)
        try:
            if not parent.poll(60):
                raise RuntimeError("the kubelet stand-in did not start")
            parent.recv()
            poll = _poll_cost(jobs)
            sampler = sampler_for(jobs)
            attributed = len(sampler.sample_once().jobs or {})
            if attributed != len(uuids):
                raise RuntimeError(f"the listener attributed {attributed} of {len(uuids)} GPUs")
            quiet = sampling_cost(sampler, cycles)
            with _polling_flat_out(jobs):
                busy = sampling_cost(sampler, cycles)
        finally:
            jobs.close()
            server.terminate()
            server.join(10)
    return {
        "k8s_pods": len(uuids) + OTHER_PODS,
        **poll,
        "k8s_sampling_cpu_ms_per_cycle": quiet["cpu_ms_per_cycle"],
        "k8s_cycle_wall_ms_p50": busy["cycle_wall_ms_p50"],
        "k8s_cycle_wall_ms_p99": busy["cycle_wall_ms_p99"],
    }


def _poll_cost(jobs: KubernetesJobs) -> dict[str, float]:
    jobs.poll_once()  # the first answer is decoded; the usual poll finds it unchanged
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    for _ in range(POLLS):
        jobs.poll_once()
    return {
        "k8s_poll_cpu_ms": round((time.process_time() - cpu_start) * 1000 / POLLS, 3),
        "k8s_poll_wall_ms": round((time.perf_counter() - wall_start) * 1000 / POLLS, 3),
    }


@contextmanager
def _polling_flat_out(jobs: KubernetesJobs) -> Iterator[None]:
    """The listener asking the kubelet as fast as it answers, on a thread of its own, meanwhile."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            jobs.poll_once()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)


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
