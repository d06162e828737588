"""Whether the database takes writes now, and if not, why.

Ingest consults this before it queues a batch: while the database is known to be away (or to be a
standby, which takes no writes), a request is
answered 503 at once with the cause, instead of waiting on a pool that cannot connect (exporters give
up after ~10 s and would never see the answer). /healthz and /metrics report the same state.

What sets it: every write's outcome (a failure is classified, a success clears it) and the watch
(collector/store/watch.py), which probes the server every second whether or not anyone writes. An
embedded server's supervisor (gpuscope/core/embedded_pg.py) tells "restarting" apart from "unreachable".
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import psycopg
import psycopg.errors
import psycopg_pool

# SQLSTATEs of a server that is there but not taking connections now: shutting down or starting up.
RESTART_STATES = {"57P01", "57P02", "57P03"}  # admin_shutdown, crash_shutdown, cannot_connect_now
DISK_FULL_TEXT = "No space left on device"
# libpq's words when target_session_attrs=read-write (or primary) found no host that takes writes: every
# host of the DSN is a standby (a Patroni cluster with no leader, or a DSN naming standbys only).
NO_PRIMARY_TEXTS = ("session is read-only", "server is in hot standby mode")
# After a disk-full failure, this much more free space in the data directory counts as "freed".
FREED_BYTES = 16 * 2**20


class Cause(StrEnum):
    OK = "ok"
    UNREACHABLE = "database unreachable"
    RESTARTING = "database restarting"
    DISK_FULL = "disk full"
    STANDBY = "database is a standby"  # read-only: left on, or pointed at, a server that is not the primary
    # Reachable, a primary, yet a write did not finish within the write deadline: say, a primary whose
    # synchronous standby has gone (promoted elsewhere while its Patroni was dead), where every commit waits.
    NOT_COMMITTING = "commits not finishing"


class StandbyDatabase(psycopg.OperationalError):
    """The watch's probe reached a server in recovery (a standby): it takes no writes."""


class CommitsStuck(psycopg.OperationalError):
    """The watch's probe found this collector's commits waiting on the server for a synchronous standby
    far past the write deadline: a primary left behind by a failover (its Patroni dead), or one whose
    standbys are all gone. Writes are refused there until that ends (store/route.py)."""

    def __init__(self, message: str, host: str, port: str) -> None:
        super().__init__(message)
        self.host, self.port = host, port

    @property
    def host_port(self) -> tuple[str, str]:
        return (self.host, self.port)


@dataclass(frozen=True)
class Availability:
    cause: Cause
    detail: str  # one line: the error, the free space, the supervisor's word
    since: float  # time.time() of the change to this cause
    free_bytes: int | None = None  # of the data directory's file system, where it is known

    @property
    def ok(self) -> bool:
        return self.cause is Cause.OK

    @property
    def reason(self) -> str:
        """What a 503 and /healthz say: the cause, then the detail."""
        return self.cause.value if not self.detail else f"{self.cause.value}: {self.detail}"


class DatabaseStatus:
    """Thread-safe: writes happen on the event loop, /healthz runs in the thread pool. The state is one
    immutable object, replaced under the lock and read without it."""

    def __init__(self, data_dir: Path | None = None, server_problem: Callable[[], str | None] | None = None) -> None:
        # data_dir: an embedded server's (its free space is ours to read); None for --db.
        # server_problem(): the supervisor's sentence while the server is not running, else None.
        self.data_dir = data_dir
        self._server_problem = server_problem
        self._lock = threading.Lock()
        self._state = Availability(Cause.OK, "", time.time())
        self._free_at_failure: int | None = None
        self._fenced = False  # commits seen stuck: writes refused, not tried (CommitsStuck)

    def current(self) -> Availability:
        """The state now; a supervisor restarting the server overrides what the last write saw."""
        problem = self._server_problem() if self._server_problem else None
        state = self._state  # replaced whole under the lock, so read whole without it
        if problem is not None and state.cause is not Cause.DISK_FULL:
            free = self.free_bytes()
            if free is not None and free < FREED_BYTES:
                return Availability(Cause.DISK_FULL, _free_text(free, self.data_dir), state.since, free)
            return Availability(Cause.RESTARTING, problem, state.since, free)
        return state

    def refuses_writes(self) -> Availability | None:
        """The state when a write should not even be tried (the server is away), else None. A full disk
        is tried: its failure is immediate, and the first write after space is freed succeeds."""
        if self._state.cause is Cause.OK and (self._server_problem is None or self._server_problem() is None):
            return None  # the hot path: every batch asks
        state = self.current()
        if state.cause is Cause.NOT_COMMITTING and self._fenced:
            return state
        return state if state.cause in (Cause.UNREACHABLE, Cause.RESTARTING, Cause.STANDBY) else None

    def wrote(self) -> None:
        if self._state.cause is not Cause.OK:  # every group commit says so: nothing to do in the usual case
            self._fenced = False
            self._set(Cause.OK, "")

    def fence(self, detail: str) -> None:
        """Commits are stuck on the server (the watch saw them): refuse writes at once until a probe finds
        a server where they are not."""
        self._fenced = True
        self._set(Cause.NOT_COMMITTING, detail)

    def failed(self, exc: BaseException) -> Availability:
        """Record a failed write or probe; returns the state it leads to."""
        cause = classify(exc)
        if cause is Cause.DISK_FULL:
            free = self.free_bytes()
            with self._lock:
                self._free_at_failure = free
            return self._set(cause, _free_text(free, self.data_dir) if free is not None else _first_line(exc), free)
        if cause is Cause.OK:  # not about availability (a bad value, a bug): nothing changes
            return self.current()
        return self._set(cause, _first_line(exc))

    def stalled(self, detail: str) -> None:
        """A write outlived its deadline. Writes are still tried (the first to finish clears this), but
        /healthz is unhealthy meanwhile: a load balancer or an operator should not trust this path."""
        if self._state.cause is Cause.OK:
            self._set(Cause.NOT_COMMITTING, detail)

    def reachable(self) -> bool:
        """The watch reached the server; True when that ends an outage. A full disk is left standing
        until a write succeeds or space is freed (a read works on a full disk); commits that do not
        finish, until one does (the watch's probe reads, so it cannot tell), unless the watch saw them
        stuck (fence): then a probe that finds none stuck ends it."""
        cause = self._state.cause
        if cause is Cause.OK or (cause is Cause.NOT_COMMITTING and not self._fenced):
            return False
        if cause is Cause.DISK_FULL:
            free, before = self.free_bytes(), self._free_at_failure
            if free is None or before is None or free < before + FREED_BYTES:
                return False
        self._fenced = False
        self._set(Cause.OK, "")
        return True

    def free_bytes(self) -> int | None:
        if self.data_dir is None:
            return None
        try:
            return shutil.disk_usage(self.data_dir).free
        except OSError:
            return None

    def _set(self, cause: Cause, detail: str, free: int | None = None) -> Availability:
        with self._lock:
            since = self._state.since if self._state.cause is cause else time.time()
            self._state = Availability(cause, detail, since, free)
            return self._state


def classify(exc: BaseException) -> Cause:
    """What a database error says about availability; Cause.OK when it says nothing about it."""
    if isinstance(exc, psycopg.errors.DiskFull) or DISK_FULL_TEXT in str(exc):
        return Cause.DISK_FULL
    if isinstance(exc, StandbyDatabase | psycopg.errors.ReadOnlySqlTransaction) or no_primary(exc):
        return Cause.STANDBY
    if isinstance(exc, psycopg_pool.PoolTimeout | TimeoutError):
        return Cause.UNREACHABLE
    if isinstance(exc, psycopg.OperationalError):
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate in RESTART_STATES:
            return Cause.RESTARTING
        # No SQLSTATE: the connection failed or broke (refused, reset, server closed it); class 08 too.
        if sqlstate is None or sqlstate.startswith("08"):
            return Cause.UNREACHABLE
    return Cause.OK


def no_primary(exc: BaseException) -> bool:
    """Whether libpq refused every host of the DSN as not taking writes."""
    return isinstance(exc, psycopg.OperationalError) and any(text in str(exc) for text in NO_PRIMARY_TEXTS)


def _free_text(free: int | None, data_dir: Path | None) -> str:
    if free is None:
        return "the database server's disk is full"
    return f"{free / 2**20:.1f} MiB free in {data_dir}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
