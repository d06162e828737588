"""Several collector processes on one port (--workers N): each has its own listening socket with
SO_REUSEPORT, so the kernel spreads connections across them, and its own event loop, pools and group
writer. Python runs one core per process; a collector host with spare cores uses them this way.

The parent holds the database (an embedded one lives as long as the parent) and watches the workers:
SIGTERM or SIGINT stops them all; a worker that dies stops the rest, so a supervisor (systemd,
Kubernetes) restarts the whole collector rather than running it at part strength.

/metrics sums every worker's counters, whichever worker a scrape reaches: the parent makes a private
folder, empty, for this run and names it in PROMETHEUS_MULTIPROC_DIR before it starts the workers, each
writes its figures there (prometheus_client's multiprocess mode, collector/ingest/state.py), and the
folder goes when the workers have stopped.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from multiprocessing.process import BaseProcess

from prometheus_client import multiprocess

from gpuscope.collector.ingest.state import MULTIPROCESS_DIR_VARIABLE

log = logging.getLogger(__name__)


def reuse_port_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


# Workers told to stop get this long, all together, before they are killed (a stop is promised in 10 s).
WORKERS_STOP_S = 5.0


def run_workers(
    count: int, target: Callable[..., None], args: tuple[object, ...], on_stop_signal: Callable[[], None] = lambda: None
) -> int:
    """Start `count` processes running target(*args); return when they have all stopped (exit code)."""
    context = multiprocessing.get_context("spawn")  # no inherited threads or event loops
    workers: list[BaseProcess] = [
        context.Process(target=target, args=args, name=f"collector-worker-{n}", daemon=False) for n in range(count)
    ]
    stopping = threading.Event()

    def stop(signum: int, _frame: object) -> None:
        log.info("stopping %d collector workers (signal %d)", count, signum)
        stopping.set()
        on_stop_signal()

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        with shared_metrics_dir() as metrics_dir:
            return _supervise(workers, stopping, metrics_dir)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(workers: list[BaseProcess], stopping: threading.Event, metrics_dir: str) -> int:
    for worker in workers:
        worker.start()
    while not stopping.is_set() and all(w.is_alive() for w in workers):
        stopping.wait(0.5)
    for worker in workers:
        if not worker.is_alive() and worker.pid is not None:
            # Its counts stay in the sums the others serve until they stop; its live gauges leave them.
            multiprocess.mark_process_dead(worker.pid, metrics_dir)
    failed = [w for w in workers if not w.is_alive() and w.exitcode not in (0, None)]
    if failed:
        log.error("collector worker %s exited with %s: stopping the others", failed[0].name, failed[0].exitcode)
    for worker in workers:
        if worker.is_alive() and worker.pid is not None:
            worker.terminate()  # SIGTERM: uvicorn finishes in-flight requests, lifespan closes the pools
    deadline = time.monotonic() + WORKERS_STOP_S
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
        if worker.is_alive():
            log.warning("collector worker %s did not stop in %.0f s: killed", worker.name, WORKERS_STOP_S)
            worker.kill()
            worker.join(1.0)
    return 1 if failed else 0


@contextlib.contextmanager
def shared_metrics_dir() -> Iterator[str]:
    """A new folder, readable by this user only, where the workers started inside the context keep their
    metrics; named in the environment they inherit, and removed, with the name, at the end."""
    folder = tempfile.mkdtemp(prefix="gpuscope-collector-metrics-")
    before = os.environ.get(MULTIPROCESS_DIR_VARIABLE)
    os.environ[MULTIPROCESS_DIR_VARIABLE] = folder
    try:
        yield folder
    finally:
        if before is None:
            os.environ.pop(MULTIPROCESS_DIR_VARIABLE, None)
        else:
            os.environ[MULTIPROCESS_DIR_VARIABLE] = before
        shutil.rmtree(folder, ignore_errors=True)
