"""A pusher against a loopback HTTP server standing in for the collector (or against a closed port), and
ways to read what it sent or spooled: shared by the pusher's durability tests."""

from __future__ import annotations

import errno
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpuscope.collector.ingest.wire import decode
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.pusher import Pusher
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.spool import SUFFIX, Spool
from gpuscope.exporter.wire import Origin

TOKEN = "d" * 32
GPUS = 8  # per snapshot of helpers.snapshots

Ident = tuple[uuid.UUID, int]  # (exporter_id, seq): what names a batch to the collector


@dataclass
class FakeCollector:
    """Answers each push with the next scripted (status, Retry-After), then `status`; records every body."""

    status: int = 200
    script: list[tuple[int, str | None]] = field(default_factory=list)
    received: list[tuple[float, bytes]] = field(default_factory=list)  # (time.monotonic(), body)

    def answer(self, body: bytes) -> tuple[int, str | None]:
        self.received.append((time.monotonic(), body))
        return self.script.pop(0) if self.script else (self.status, None)


class FullDisk(Spool):
    """A spool on a disk that is full until `full` is cleared: writes fail as the kernel's would (ENOSPC)."""

    full = True

    def put(self, body: bytes) -> Path:
        self._refuse_while_full()
        return super().put(body)

    def replace(self, path: Path, body: bytes) -> None:
        self._refuse_while_full()
        super().replace(path, body)

    def _refuse_while_full(self) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")


@contextmanager
def serving(collector: FakeCollector, port: int = 0) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real collector

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            status, retry_after = collector.answer(body)
            self.send_response(status)
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def running(pusher: Pusher) -> Iterator[None]:
    """The pusher's thread, as the exporter runs it; leaving only stops the thread, as a SIGKILL would
    (no flush, no spill, no close)."""
    stop = threading.Event()
    thread = threading.Thread(target=pusher.run, args=(stop,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=15)
        assert not thread.is_alive()


def new_pusher(
    url: str, spool: Spool, push_interval: float = 0.0, max_snapshots_per_batch: int = 60, queue_limit: int = 3600
) -> Pusher:
    origin = Origin("durability", "rack-00", "node-000", "sim", str(uuid.uuid4()))
    return Pusher(url, TOKEN, origin, max_snapshots_per_batch, push_interval, queue_limit, spool=spool)


def unpack(body: bytes) -> tuple[Ident, list[float]]:
    """A batch's (exporter_id, seq) and the timestamps of its snapshots, in order."""
    batch = decode(body, now=time.time() + 60, content_type=BINARY_CONTENT_TYPE)
    stamps = batch.gpu_samples.ts.tolist()
    assert stamps == sorted(stamps) and len(stamps) % GPUS == 0
    return (batch.exporter_id, batch.seq), stamps[::GPUS]


def spooled(directory: Path) -> list[tuple[Ident, list[float]]]:
    return [unpack(path.read_bytes()) for path in sorted(directory.glob("*" + SUFFIX))]


def stamps_of(taken: list[Snapshot]) -> list[float]:
    return [snapshot.ts for snapshot in taken]


def flat(batches: list[tuple[Ident, list[float]]]) -> list[float]:
    """The snapshots' timestamps of these batches, one after the other."""
    return [stamp for _, stamps in batches for stamp in stamps]
