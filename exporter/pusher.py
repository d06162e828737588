"""Sends snapshots to the collector in batches, retrying a batch under the same sequence number.

A retried batch keeps its (exporter_id, seq), so the collector stores it once however often it
arrives. Snapshots wait in a bounded in-memory queue; while the collector is unreachable (network
errors, 5xx, 429, 401) full batches move to the on-disk spool, and at shutdown everything unsent is
spooled, to be replayed first, in order, once the collector answers. Without a spool, or past the
spool's cap, the oldest data is dropped and counted.
"""

from __future__ import annotations

import http.client
import logging
import random
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from gpuscope.exporter.events import Event, EventTracker
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.spool import Spool
from gpuscope.exporter.textformat import Family
from gpuscope.exporter.wire import BINARY_CONTENT_TYPE, BINARY_MAGIC, Origin, encode_binary

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/samples"


@dataclass
class PushStats:
    batches_sent: int = 0
    snapshots_sent: int = 0
    snapshots_dropped: int = 0  # queue overflow
    batches_rejected: int = 0  # the collector refused them for good (4xx)
    failures: int = 0  # network errors, 5xx: retried


@dataclass
class _Batch:
    body: bytes
    count: int  # snapshots in it (0 when read back from the spool: not known, not needed)
    spool_path: Path | None = None


class Pusher:
    def __init__(
        self,
        url: str,
        token: str,
        origin: Origin,
        max_snapshots_per_batch: int = 60,
        push_interval: float = 0.0,
        queue_limit: int = 3600,
        timeout: float = 10.0,
        spool: Spool | None = None,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"push URL must be http(s)://HOST[:PORT], got {url!r}")
        self._parsed = parsed
        self._token = token
        self._origin = origin
        self._max_batch = max_snapshots_per_batch
        # Snapshots wait up to this long to travel together: one request per node every 10 s instead of
        # every sample is what lets one collector take a 100,000-GPU cluster sampled every second.
        self._push_interval = push_interval
        self._last_push = 0.0
        self._timeout = timeout
        # Each snapshot with the events seen when it was taken (exporter/events.py).
        self._queue: deque[tuple[Snapshot, list[Event]]] = deque()
        self._events = EventTracker()
        self._queue_limit = queue_limit
        self._cond = threading.Condition()
        self._seq = 0
        self._in_flight: _Batch | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._send_lock = threading.Lock()  # the run loop and a shutdown flush may overlap
        self.spool = spool
        self.stats = PushStats()

    def enqueue(self, snapshot: Snapshot) -> None:
        with self._cond:
            events = self._events.observe(snapshot)
            if len(self._queue) >= self._queue_limit:
                _, dropped_events = self._queue.popleft()
                self.stats.snapshots_dropped += 1
                if dropped_events:  # samples may be dropped under pressure; events are rare and kept
                    if self._queue:
                        oldest, oldest_events = self._queue[0]
                        self._queue[0] = (oldest, dropped_events + oldest_events)
                    else:
                        events = dropped_events + events
            self._queue.append((snapshot, events))
            self._cond.notify()

    def pending(self) -> int:
        """Snapshots not yet acknowledged, in memory; spooled batches are counted by the spool."""
        with self._cond:
            return len(self._queue) + (self._in_flight.count if self._in_flight else 0)

    def backlog(self) -> bool:
        with self._cond:
            return bool(self._queue or self._in_flight or (self.spool is not None and len(self.spool)))

    def run(self, stop: threading.Event) -> None:
        backoff = 0.0
        retry_at = 0.0
        while not stop.is_set():
            if time.monotonic() < retry_at:
                # Backing off: keep memory bounded by moving full batches to disk meanwhile.
                with self._send_lock:
                    self._spill_queue(minimum=self._max_batch)
                stop.wait(min(0.5, retry_at - time.monotonic()))
                continue
            if not self._due():
                with self._cond:
                    self._cond.wait(timeout=min(0.5, max(0.01, self._push_interval)))
                continue
            if self.push_once():
                backoff = 0.0
            else:
                backoff = min(60.0, max(1.0, backoff * 2))
                # Jitter: a recovering collector is not hit by every exporter at the same instant.
                retry_at = time.monotonic() + backoff * random.uniform(0.5, 1.0)

    def _due(self) -> bool:
        """Something to send now: a retry or spooled batch, a full batch, or the push interval is up."""
        with self._cond:
            if self._in_flight or (self.spool is not None and len(self.spool)):
                return True
            if not self._queue:
                return False
            full = len(self._queue) >= self._max_batch
            return full or time.monotonic() - self._last_push >= self._push_interval

    def flush(self, deadline: float) -> bool:
        """Push everything queued, giving up at `deadline` (time.monotonic()); True when all was sent."""
        while self.backlog() and time.monotonic() < deadline:
            if not self.push_once():
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return not self.backlog()

    def spill(self) -> int:
        """Write everything unsent to the spool (at shutdown); returns the snapshots that had nowhere to go."""
        with self._send_lock:
            if self.spool is None:
                return self.pending()
            with self._cond:
                in_flight, self._in_flight = self._in_flight, None
            if in_flight is not None and in_flight.spool_path is None:
                self.spool.put(in_flight.body)
            self._spill_queue(minimum=1)
            return 0

    def push_once(self) -> bool:
        """Send the in-flight batch (forming one from the queue if none); True unless it must be retried."""
        with self._send_lock:
            return self._push_locked()

    def _push_locked(self) -> bool:
        batch = self._take_batch()
        if batch is None:
            return True
        try:
            status, reason = self._post(batch.body)
        except (OSError, http.client.HTTPException) as exc:
            self.stats.failures += 1
            log.warning("push to %s failed: %s (will retry)", self._parsed.netloc, exc)
            self._close()
            self._spill_queue(minimum=self._max_batch)
            return False
        if 200 <= status < 300:
            self._done(batch, sent=True)
            return True
        if status in (401, 403, 408, 429) or status >= 500:
            # Auth problems are retried too: an operator fixing the token must not cost the data.
            self.stats.failures += 1
            log.warning("collector answered %d %s (will retry)", status, reason)
            self._spill_queue(minimum=self._max_batch)
            return False
        self.stats.batches_rejected += 1
        log.error("collector rejected a batch: %d %s (dropped)", status, reason)
        self._done(batch, sent=False)
        return True

    def families(self) -> list[Family]:
        """The pusher's own figures, for the exporter's /metrics."""
        stats = self.stats
        out = [
            Family("gpuscope_exporter_push_batches", "counter", "Batches the collector accepted"),
            Family(
                "gpuscope_exporter_push_rejected_batches", "counter", "Batches the collector refused for good (4xx)"
            ),
            Family("gpuscope_exporter_push_failures", "counter", "Push attempts that failed and will be retried"),
            Family(
                "gpuscope_exporter_dropped_snapshots", "counter", "Snapshots dropped because the memory queue was full"
            ),
            Family("gpuscope_exporter_queue_snapshots", "gauge", "Snapshots waiting in memory"),
        ]
        for family, value in zip(
            out,
            (stats.batches_sent, stats.batches_rejected, stats.failures, stats.snapshots_dropped, self.pending()),
            strict=True,
        ):
            family.add("", value)
        if self.spool is not None:
            for name, kind, text, value in (
                ("gpuscope_exporter_spool_batches", "gauge", "Batches waiting in the on-disk spool", len(self.spool)),
                ("gpuscope_exporter_spool_bytes", "gauge", "Size of the on-disk spool", self.spool.size_bytes),
                (
                    "gpuscope_exporter_spool_dropped_batches",
                    "counter",
                    "Oldest spooled batches dropped at the size cap",
                    self.spool.dropped_batches,
                ),
            ):
                family = Family(name, kind, text)
                family.add("", value)
                out.append(family)
        return out

    def close(self) -> None:
        with self._send_lock:
            self._close()

    def _take_batch(self) -> _Batch | None:
        """The batch to send: the one in flight, else the oldest spooled, else one from the queue."""
        with self._cond:
            if self._in_flight is None and self.spool is not None:
                spooled = self.spool.oldest()
                if spooled is not None:
                    self._in_flight = _Batch(body=spooled[1], count=0, spool_path=spooled[0])
            if self._in_flight is None and self._queue:
                self._in_flight = self._encode(min(self._max_batch, len(self._queue)))
            return self._in_flight

    def _encode(self, count: int) -> _Batch:
        """Take `count` snapshots off the queue as one batch with the next sequence number (lock held)."""
        taken = [self._queue.popleft() for _ in range(count)]
        self._last_push = time.monotonic()
        snapshots = [snapshot for snapshot, _ in taken]
        events = [event for _, snapshot_events in taken for event in snapshot_events]
        self._seq += 1
        return _Batch(body=encode_binary(self._origin, self._seq, snapshots, events), count=count)

    def _spill_queue(self, minimum: int) -> None:
        """While the collector is away, move queued snapshots to disk in batches of at least `minimum`."""
        if self.spool is None:
            return
        while True:
            with self._cond:
                if len(self._queue) < minimum or not self._queue:
                    return
                batch = self._encode(min(self._max_batch, len(self._queue)))
            self.spool.put(batch.body)

    def _done(self, batch: _Batch, sent: bool) -> None:
        with self._cond:
            self._in_flight = None
        if batch.spool_path is not None and self.spool is not None:
            self.spool.remove(batch.spool_path)
        if sent:
            self.stats.batches_sent += 1
            self.stats.snapshots_sent += batch.count

    def _post(self, body: bytes) -> tuple[int, str]:
        reused = self._conn is not None
        try:
            return self._send(body)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            if not reused:
                raise
            # The collector closed our idle keep-alive connection: an ordinary event, not a failure.
            # The batch was not taken (no response came), so sending it again on a new connection is safe,
            # and a repeat would be recognised by its sequence number anyway.
            self._close()
            return self._send(body)

    def _send(self, body: bytes) -> tuple[int, str]:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._parsed.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._parsed.hostname or "", self._parsed.port, timeout=self._timeout)
        base = self._parsed.path.rstrip("/")
        self._conn.request(
            "POST",
            base + INGEST_PATH,
            body=body,
            headers={"Authorization": f"Bearer {self._token}", **_content_headers(body)},
        )
        response = self._conn.getresponse()
        detail = response.read()[:2000].decode("utf-8", "replace")  # read all: keeps the connection usable
        return response.status, f"{response.reason}: {detail}" if response.status >= 400 else response.reason

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _content_headers(body: bytes) -> dict[str, str]:
    """By the body itself: a spool written by an older exporter may still hold gzip JSON (format v1)."""
    if body.startswith(BINARY_MAGIC):
        return {"Content-Type": BINARY_CONTENT_TYPE}
    return {"Content-Type": "application/json", "Content-Encoding": "gzip"}
