"""Keeps an embedded PostgreSQL running for as long as the collector does.

Every half second the supervisor asks whether the server process has exited (which also reaps it: no
zombie). If it has, the server is started again on the same data directory and port, with back-off;
the collector's pools reconnect to the address they know. While it is down, problem() says so, and
the collector answers ingest 503 "database restarting" and /healthz unhealthy. A server that keeps
failing to start is logged at CRITICAL with the server's own last words, and tried again every
RETRY_CAP_S: a full disk that is freed, say, brings it back with no operator.
"""

from __future__ import annotations

import logging
import threading
import time

from gpuscope.core.embedded_pg import EmbeddedPostgres, EmbeddedPostgresError
from gpuscope.core.pg_lockfile import DataDirectoryInUse

log = logging.getLogger(__name__)

CHECK_S = 0.5
FIRST_RETRY_S = 0.5
RETRY_CAP_S = 10.0
CRASH_LOOP_TRIES = 6  # failed starts in a row before it is called a crash loop (about 25 s of tries)
START_TIMEOUT_S = 60.0  # crash recovery replays the WAL written since the last checkpoint


class Supervisor:
    def __init__(
        self,
        server: EmbeddedPostgres,
        first_retry_s: float = FIRST_RETRY_S,
        retry_cap_s: float = RETRY_CAP_S,
        crash_loop_tries: int = CRASH_LOOP_TRIES,
    ) -> None:
        self.server = server
        self.first_retry_s = first_retry_s
        self.retry_cap_s = retry_cap_s
        self.crash_loop_tries = crash_loop_tries
        self.restarts = 0
        self._problem: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="postgres-supervisor", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Before the server is stopped, so that its exit is not taken for a crash."""
        self._stop.set()
        self._thread.join(timeout=2.0)

    def problem(self) -> str | None:
        """None while the server runs; else what happened and what is being done, in a line."""
        return self._problem

    def _run(self) -> None:
        while not self._stop.wait(CHECK_S):
            code = self.server.exit_code()
            if code is not None:
                self._bring_back(code)

    def _bring_back(self, code: int) -> None:
        how = f"was killed by signal {-code}" if code < 0 else f"exited with status {code}"
        self._problem = f"the embedded PostgreSQL server {how}; starting it again"
        log.error("embedded PostgreSQL %s; starting it again on %s", how, self.server.pgdata)
        began = time.monotonic()
        delay, failures = self.first_retry_s, 0
        while not self._stop.is_set():
            try:
                self.server.restart(timeout=START_TIMEOUT_S)
            except (EmbeddedPostgresError, DataDirectoryInUse, OSError) as exc:
                if self._stop.is_set():
                    return
                failures += 1
                last_words = _last_line(exc)
                self._problem = f"the embedded PostgreSQL server {how}; {failures} restarts failed: {last_words}"
                if failures == self.crash_loop_tries:
                    log.critical(
                        "embedded PostgreSQL keeps failing to start (%d tries in %.0f s): %s. Ingest answers 503 "
                        "until it starts; trying again every %g s. Its log: %s",
                        failures,
                        time.monotonic() - began,
                        last_words,
                        self.retry_cap_s,
                        self.server.data_dir / "postgres.log",
                    )
                else:
                    log.error("embedded PostgreSQL did not start (try %d): %s", failures, last_words)
                self._stop.wait(delay)
                delay = min(self.retry_cap_s, delay * 2)
                continue
            self.restarts += 1
            self._problem = None
            took = time.monotonic() - began
            log.warning("embedded PostgreSQL is back after %.1f s (%d failed tries)", took, failures)
            return


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    fatal = [line for line in lines if "FATAL" in line or "PANIC" in line]
    return (fatal or lines or [type(exc).__name__])[-1]
