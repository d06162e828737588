"""Sends snapshots to the collector in batches, retrying a batch under the same sequence number.

A retried batch keeps its (exporter_id, seq), so the collector stores it once however often it
arrives. Until spooling to disk lands, the queue is bounded in memory: when the collector is away
longer than the queue covers, the oldest snapshots are dropped and counted.
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

from exporter.snapshot import Snapshot
from exporter.wire import Origin, encode_batch, to_body

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
    seq: int
    body: bytes
    count: int


class Pusher:
    def __init__(
        self,
        url: str,
        token: str,
        origin: Origin,
        max_snapshots_per_batch: int = 60,
        queue_limit: int = 3600,
        timeout: float = 10.0,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"push URL must be http(s)://HOST[:PORT], got {url!r}")
        self._parsed = parsed
        self._token = token
        self._origin = origin
        self._max_batch = max_snapshots_per_batch
        self._timeout = timeout
        self._queue: deque[Snapshot] = deque()
        self._queue_limit = queue_limit
        self._cond = threading.Condition()
        self._seq = 0
        self._in_flight: _Batch | None = None
        self._conn: http.client.HTTPConnection | None = None
        self._send_lock = threading.Lock()  # the run loop and a shutdown flush may overlap
        self.stats = PushStats()

    def enqueue(self, snapshot: Snapshot) -> None:
        with self._cond:
            if len(self._queue) >= self._queue_limit:
                self._queue.popleft()
                self.stats.snapshots_dropped += 1
            self._queue.append(snapshot)
            self._cond.notify()

    def pending(self) -> int:
        with self._cond:
            return len(self._queue) + (self._in_flight.count if self._in_flight else 0)

    def run(self, stop: threading.Event) -> None:
        backoff = 0.0
        while not stop.is_set():
            with self._cond:
                if self._in_flight is None and not self._queue:
                    self._cond.wait(timeout=0.5)
                    continue
            if self.push_once():
                backoff = 0.0
            else:
                backoff = min(60.0, max(1.0, backoff * 2))
                stop.wait(backoff * random.uniform(0.5, 1.0))  # jitter: don't stampede a recovering collector

    def flush(self, deadline: float) -> bool:
        """Push everything queued, giving up at `deadline` (time.monotonic()); True when all was sent."""
        while self.pending() and time.monotonic() < deadline:
            if not self.push_once():
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return self.pending() == 0

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
            return False
        if 200 <= status < 300:
            self._done(batch, sent=True)
            return True
        if status in (401, 403, 408, 429) or status >= 500:
            # Auth problems are retried too: an operator fixing the token must not cost the data.
            self.stats.failures += 1
            log.warning("collector answered %d %s (will retry)", status, reason)
            return False
        self.stats.batches_rejected += 1
        log.error("collector rejected batch seq=%d: %d %s (dropped)", batch.seq, status, reason)
        self._done(batch, sent=False)
        return True

    def close(self) -> None:
        with self._send_lock:
            self._close()

    def _take_batch(self) -> _Batch | None:
        with self._cond:
            if self._in_flight is None and self._queue:
                snapshots = [self._queue.popleft() for _ in range(min(self._max_batch, len(self._queue)))]
                self._seq += 1
                body = to_body(encode_batch(self._origin, self._seq, snapshots))
                self._in_flight = _Batch(seq=self._seq, body=body, count=len(snapshots))
            return self._in_flight

    def _done(self, batch: _Batch, sent: bool) -> None:
        with self._cond:
            self._in_flight = None
        if sent:
            self.stats.batches_sent += 1
            self.stats.snapshots_sent += batch.count

    def _post(self, body: bytes) -> tuple[int, str]:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._parsed.scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._parsed.hostname or "", self._parsed.port, timeout=self._timeout)
        base = self._parsed.path.rstrip("/")
        self._conn.request(
            "POST",
            base + INGEST_PATH,
            body=body,
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
            },
        )
        response = self._conn.getresponse()
        detail = response.read()[:2000].decode("utf-8", "replace")  # read all: keeps the connection usable
        return response.status, f"{response.reason}: {detail}" if response.status >= 400 else response.reason

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
