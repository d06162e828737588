"""Sends snapshots to the collector in batches, retrying a batch under the same sequence number.

A retried batch keeps its (exporter_id, seq), so the collector stores it once however often it
arrives. Snapshots wait in a bounded in-memory queue until the push interval is up. With a spool, the
first failed try of a batch (network errors, 5xx, 429, 408, 401/403) writes that batch and everything
queued to disk before backing off, and each back-off tick writes what was sampled since, so a killed
exporter loses at most a tick's snapshots. What is sampled during the outage fills one open batch at a
time, rewritten in place at each tick until full (exporter/open_batch.py), so a long outage leaves one
file per full batch. Spooled batches are replayed first, in order, unmerged.
A spool that cannot be written keeps the snapshots in memory and is tried again. Without a spool, or
past either cap, the oldest data is dropped and counted. Retry-After (503, 429) is honoured.
"""

from __future__ import annotations

import email.utils
import http.client
import logging
import random
import threading
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from functools import partial
from pathlib import Path
from typing import NamedTuple

from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE, INGEST_PATH, JSON_CONTENT_TYPE
from gpuscope.exporter.events import EventTracker
from gpuscope.exporter.open_batch import OpenBatch, Queued, encode
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.spool import Spool
from gpuscope.exporter.textformat import Family
from gpuscope.exporter.wire import BINARY_MAGIC, Origin

log = logging.getLogger(__name__)

RETRIED = (401, 403, 408, 429)  # and every 5xx
BACKOFF_TICK_S = 0.5  # while backing off, what was sampled reaches the spool at least this often
BACKOFF_MAX_S = 60.0
RETRY_AFTER_MAX_S = 300.0  # a collector's (or proxy's) Retry-After beyond this is not believed


@dataclass
class PushStats:
    batches_sent: int = 0
    snapshots_sent: int = 0
    snapshots_dropped: int = 0  # queue overflow
    batches_rejected: int = 0  # the collector refused them for good (4xx)
    failures: int = 0  # network errors, 5xx: retried
    spool_write_failures: int = 0  # the spool refused a batch (disk full, EIO): kept in memory, tried again


@dataclass
class _Batch:
    body: bytes
    count: int  # snapshots in it (0 when read back from the spool: not known, not needed)
    spool_path: Path | None = None  # where it is on disk, if it is


class _Answer(NamedTuple):
    status: int
    reason: str
    retry_after: float | None  # seconds the collector asked for (503, 429), if it asked


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
        if queue_limit < 1:
            raise ValueError("the memory queue must hold at least one snapshot")
        self._parsed = parsed
        self._token = token
        self._origin = origin
        self._max_batch = max_snapshots_per_batch
        # Snapshots wait up to this long to travel together: one request per node every 10 s instead of
        # every sample is what lets one collector take a 100,000-GPU cluster sampled every second.
        self._push_interval = push_interval
        self._last_push = 0.0
        self._timeout = timeout
        self._queue: deque[Queued] = deque()
        self._events = EventTracker()
        self._queue_limit = queue_limit
        self._cond = threading.Condition()
        self._seq = 0
        self._in_flight: _Batch | None = None
        self._open: OpenBatch | None = None  # growing on disk while backing off; touched under the send lock
        self._conn: http.client.HTTPConnection | None = None
        self._send_lock = threading.Lock()  # the run loop and a shutdown flush may overlap
        self._spool_failing = False  # so a full disk is logged once, not at every tick
        self.spool = spool
        self.stats = PushStats()
        self.retry_after: float | None = None  # what the last failed try's answer asked for

    def enqueue(self, snapshot: Snapshot) -> None:
        with self._cond:
            self._queue.append((snapshot, self._events.observe(snapshot)))
            self._trim_queue()
            self._cond.notify()

    def pending(self) -> int:
        """Snapshots not yet acknowledged, in memory only; spooled batches are counted by the spool."""
        with self._cond:
            in_flight = self._in_flight
            unspooled = in_flight.count if in_flight is not None and in_flight.spool_path is None else 0
            return len(self._queue) + unspooled

    def backlog(self) -> bool:
        with self._cond:
            return bool(self._queue or self._in_flight or (self.spool is not None and len(self.spool)))

    def run(self, stop: threading.Event) -> None:
        backoff = 0.0
        retry_at = 0.0
        while not stop.is_set():
            if time.monotonic() < retry_at:
                # Backing off: what was sampled meanwhile goes to disk at every tick, so a killed exporter
                # loses at most one tick's snapshots (and memory stays small through a long outage).
                with self._send_lock:
                    self._spool_unsent()
                stop.wait(min(BACKOFF_TICK_S, retry_at - time.monotonic()))
                continue
            if not self._due():
                with self._cond:
                    self._cond.wait(timeout=min(0.5, max(0.01, self._push_interval)))
                continue
            if self.push_once():
                backoff = 0.0
            else:
                backoff = min(BACKOFF_MAX_S, max(1.0, backoff * 2))
                retry_at = time.monotonic() + self._retry_delay(backoff)

    def _retry_delay(self, backoff: float) -> float:
        # Jitter: a recovering collector is not hit by every exporter at the same instant.
        delay = backoff * random.uniform(0.5, 1.0)
        if self.retry_after is not None:  # the collector knows best when it can take us again
            delay = max(delay, self.retry_after * random.uniform(1.0, 1.2))
        return delay

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
                wait = max(0.5, self.retry_after or 0.0)
                time.sleep(min(wait, max(0.0, deadline - time.monotonic())))
        return not self.backlog()

    def spill(self) -> int:
        """Write everything unsent to the spool (at shutdown); returns the snapshots that had nowhere to go."""
        with self._send_lock:
            self._spool_unsent()
            self._open = None  # a flush may send what is spooled now: it is never written again
            return self.pending()

    def push_once(self) -> bool:
        """Send the in-flight batch (forming one from the queue if none); True unless it must be retried."""
        with self._send_lock:
            return self._push_locked()

    def _push_locked(self) -> bool:
        batch = self._take_batch()
        if batch is None:
            return True
        self.retry_after = None
        try:
            answer = self._post(batch.body)
        except (OSError, http.client.HTTPException) as exc:
            log.warning("push to %s failed: %s (will retry)", self._parsed.netloc, exc)
            self._close()
            return self._failed()
        if 200 <= answer.status < 300:
            self._done(batch, sent=True)
            return True
        if answer.status in RETRIED or answer.status >= 500:
            # Auth problems are retried too: an operator fixing the token must not cost the data.
            log.warning("collector answered %d %s (will retry)", answer.status, answer.reason)
            self.retry_after = answer.retry_after
            return self._failed()
        self.stats.batches_rejected += 1
        log.error("collector rejected a batch: %d %s (dropped)", answer.status, answer.reason)
        self._done(batch, sent=False)
        return True

    def _failed(self) -> bool:
        """A try to repeat: before backing off, everything unacknowledged goes to disk (with a spool)."""
        self.stats.failures += 1
        self._spool_unsent()
        return False

    def families(self) -> list[Family]:
        """The pusher's own figures, for the exporter's /metrics; each cap has the counter of what it cost."""
        stats, spool = self.stats, self.spool
        figures = [
            ("gpuscope_exporter_push_batches", "counter", "Batches the collector accepted", stats.batches_sent),
            (
                "gpuscope_exporter_push_rejected_batches",
                "counter",
                "Batches refused for good (4xx)",
                stats.batches_rejected,
            ),
            ("gpuscope_exporter_push_failures", "counter", "Push attempts that will be retried", stats.failures),
            (
                "gpuscope_exporter_dropped_snapshots",
                "counter",
                "Snapshots dropped at the memory queue's cap",
                stats.snapshots_dropped,
            ),
            ("gpuscope_exporter_queue_snapshots", "gauge", "Snapshots waiting in memory", self.pending()),
        ]
        if spool is not None:
            figures += [
                ("gpuscope_exporter_spool_batches", "gauge", "Batches waiting in the on-disk spool", len(spool)),
                ("gpuscope_exporter_spool_bytes", "gauge", "Size of the on-disk spool", spool.size_bytes),
                (
                    "gpuscope_exporter_spool_dropped_batches",
                    "counter",
                    "Oldest spooled batches dropped at the size cap",
                    spool.dropped_batches,
                ),
                (
                    "gpuscope_exporter_spool_write_failures",
                    "counter",
                    "Spool writes that failed; their snapshots stayed in memory",
                    stats.spool_write_failures,
                ),
            ]
        out = []
        for name, kind, text, value in figures:
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
                # Closed before anything spooled may be sent (it may be the oldest): a sequence number
                # must never go out with one content and later with another.
                self._open = None
                spooled = self.spool.oldest()
                if spooled is not None:
                    self._in_flight = _Batch(body=spooled[1], count=0, spool_path=spooled[0])
            if self._in_flight is None and self._queue:
                self._in_flight = self._encode(self._take(min(self._max_batch, len(self._queue))))
            return self._in_flight

    def _take(self, count: int) -> list[Queued]:
        """The `count` oldest queued snapshots, off the queue (lock held)."""
        self._last_push = time.monotonic()
        return [self._queue.popleft() for _ in range(count)]

    def _encode(self, taken: list[Queued]) -> _Batch:
        """One batch of these snapshots with the next sequence number (lock held)."""
        self._seq += 1
        return _Batch(body=encode(self._origin, self._seq, taken), count=len(taken))

    def _spool_unsent(self) -> None:
        """Put the unacknowledged batch, then every queued snapshot, on disk, in that order (send lock held).

        The batch in flight is written as it is, never renumbered, merged or grown: its answer may have been
        lost after the collector stored it. The queue goes into the open batch, which was never sent."""
        spool = self.spool
        if spool is None:
            return
        with self._cond:
            in_flight = self._in_flight
        if in_flight is not None and in_flight.spool_path is None:
            path = self._spool_write(partial(spool.put, in_flight.body))
            if path is None:
                return  # nothing newer goes to disk before it
            with self._cond:
                in_flight.spool_path = path  # a later success removes the file
        while True:
            with self._cond:
                if not self._queue:
                    return
                if self._open is None:
                    self._seq += 1
                    self._open = OpenBatch(self._seq)
                open_batch = self._open
                more = self._take(min(self._max_batch - len(open_batch.taken), len(self._queue)))
            if self._spool_write(partial(open_batch.store, spool, self._origin, more)) is None:
                with self._cond:  # back in front, in order; the open batch's file keeps its last version
                    self._queue.extendleft(reversed(more))
                    self._trim_queue()
                return
            if len(open_batch.taken) >= self._max_batch:
                self._open = None  # full: the next snapshots open a batch of their own

    def _spool_write(self, write: Callable[[], Path]) -> Path | None:
        """The file `write` stored a batch in, or None when the spool cannot take it now (logged once per episode)."""
        assert self.spool is not None
        try:
            path = write()
        except OSError as exc:
            self.stats.spool_write_failures += 1
            if not self._spool_failing:
                self._spool_failing = True
                log.error(
                    "cannot write to the spool %s: %s; unsent snapshots stay in memory (at most %d) until it can",
                    self.spool.directory,
                    exc,
                    self._queue_limit,
                )
            return None
        if self._spool_failing:
            self._spool_failing = False
            log.warning("the spool %s takes batches again", self.spool.directory)
        return path

    def _trim_queue(self) -> None:
        """Drop the oldest snapshots past the queue's cap, counted (lock held)."""
        while len(self._queue) > self._queue_limit:
            _, dropped_events = self._queue.popleft()
            self.stats.snapshots_dropped += 1
            if dropped_events:  # samples may be dropped under pressure; events are rare and kept
                oldest, oldest_events = self._queue[0]
                self._queue[0] = (oldest, dropped_events + oldest_events)

    def _done(self, batch: _Batch, sent: bool) -> None:
        with self._cond:
            self._in_flight = None
        if batch.spool_path is not None and self.spool is not None:
            self.spool.remove(batch.spool_path)
        if sent:
            self.stats.batches_sent += 1
            self.stats.snapshots_sent += batch.count

    def _post(self, body: bytes) -> _Answer:
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

    def _send(self, body: bytes) -> _Answer:
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
        status = response.status
        return _Answer(
            status,
            f"{response.reason}: {detail}" if status >= 400 else response.reason,
            parse_retry_after(response.getheader("Retry-After")) if status in (429, 503) else None,
        )

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After value (RFC 9110 10.2.3: delay-seconds or an HTTP-date), at most
    RETRY_AFTER_MAX_S; None when there is none or it is not understood."""
    value = (value or "").strip()
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return min(float(value), RETRY_AFTER_MAX_S)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # RFC 9110: an HTTP-date is always GMT
        when = when.replace(tzinfo=UTC)
    seconds = when.timestamp() - (time.time() if now is None else now)
    return min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def _content_headers(body: bytes) -> dict[str, str]:
    """By the body itself: a spool written by an older exporter may still hold gzip JSON (format v1)."""
    if body.startswith(BINARY_MAGIC):
        return {"Content-Type": BINARY_CONTENT_TYPE}
    return {"Content-Type": JSON_CONTENT_TYPE, "Content-Encoding": "gzip"}
