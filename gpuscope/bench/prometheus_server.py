"""A real Prometheus on 127.0.0.1 over a given TSDB folder: started, waited for, stopped; and its size.

No scrape targets: the data comes from backfilled blocks or remote write. Prometheus 2.42 compacts on
its own: its TSDB loop wakes every minute, and one wake-up runs every compaction the planner finds (the
hourly blocks from backfill become 6 h, 18 h and 54 h blocks; overlapping ones, e.g. recording-rule blocks
added next to the raw ones, are merged first). There is no API to start one, hence wait_compacted.
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.processes import stop_process

READY_TIMEOUT_S = 120.0  # opening a day of blocks takes seconds; a slow machine gets more
STOP_TIMEOUT_S = 60.0
_BLOCK_NAME = re.compile(r"^[0-9A-HJKMNP-TV-Z]{26}$")  # a ULID: what the TSDB names its block folders


class PrometheusServer:
    """`with PrometheusServer(data_dir) as server:` runs prometheus on server.port until the block ends.
    Its configuration and log are written next to `data_dir` (<name>.yml, <name>.log)."""

    def __init__(self, data_dir: Path, rule_files: Sequence[Path] = (), prometheus: str = "prometheus") -> None:
        self.data_dir = data_dir
        self.rule_files = tuple(rule_files)
        self.prometheus = prometheus
        self.port = 0
        self.config = data_dir.with_name(data_dir.name + ".yml")
        self.log = data_dir.with_name(data_dir.name + ".log")
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> PrometheusServer:
        self.start()
        return self

    def start(self) -> None:
        """Starts prometheus on a new free port and returns once it answers /-/ready."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        rules = "".join(f"  - {path.resolve()}\n" for path in self.rule_files)
        self.config.write_text(
            "global:\n  evaluation_interval: 1m\nscrape_configs: []\n" + (rules and "rule_files:\n" + rules)
        )
        self.port = free_loopback_port()
        args = [
            self.prometheus,
            f"--config.file={self.config}",
            f"--storage.tsdb.path={self.data_dir}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--storage.tsdb.retention.time=30d",
            "--web.enable-remote-write-receiver",
        ]
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """SIGTERM and wait (Prometheus closes its TSDB cleanly); SIGKILL only if it hangs."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, STOP_TIMEOUT_S)

    def metric(self, name: str) -> float:
        """A series of Prometheus's own /metrics as written there, labels and all (e.g.
        'prometheus_tsdb_head_samples_appended_total{type="float"}')."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=10) as response:
            for line in response.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise KeyError(name)

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self._process.returncode}; see {self.log}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass  # not listening yet, or 503 while the TSDB opens
            if time.monotonic() > deadline:
                raise TimeoutError(f"prometheus not ready after {READY_TIMEOUT_S:.0f} s; see {self.log}")
            time.sleep(0.2)


def wait_compacted(server: PrometheusServer, timeout_s: float = 900.0, quiet_s: float = 10.0) -> int:
    """Waits until the TSDB's compaction loop has woken since now (about a minute) and the block folders
    have then stayed the same for `quiet_s` with no block being written; returns the number of blocks.
    One wake-up runs every compaction due, so after it the blocks stay as they are."""
    deadline = time.monotonic() + timeout_s
    triggered = server.metric("prometheus_tsdb_compactions_triggered_total")
    while server.metric("prometheus_tsdb_compactions_triggered_total") <= triggered:
        _sleep_until(deadline, "the TSDB's compaction loop to run")
    seen, since = _block_state(server.data_dir), time.monotonic()
    while time.monotonic() - since < quiet_s or seen[1]:
        _sleep_until(deadline, "compaction to finish")
        state = _block_state(server.data_dir)
        if state != seen:
            seen, since = state, time.monotonic()
    return len(seen[0])


def _sleep_until(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"gave up waiting for {what}")
    time.sleep(1.0)


def _block_state(data_dir: Path) -> tuple[frozenset[str], bool]:
    """(block folders, whether a block is being written: compaction writes <ulid>.tmp-for-creation)."""
    names = [path.name for path in data_dir.iterdir()]
    return frozenset(filter(_BLOCK_NAME.match, names)), any(name.endswith(".tmp-for-creation") for name in names)


def block_dirs(data_dir: Path) -> list[Path]:
    return sorted(path for path in data_dir.iterdir() if _BLOCK_NAME.match(path.name) and path.is_dir())


def tsdb_bytes(data_dir: Path) -> int:
    """Bytes of the persisted blocks (chunks, index, meta.json, tombstones). The head (wal/, chunks_head/)
    is left out: it is the last two hours or so of a live server, empty after a backfill."""
    return sum(path.stat().st_size for block in block_dirs(data_dir) for path in block.rglob("*") if path.is_file())
