"""Real processes to hurt: a collector with its embedded PostgreSQL (`gpuscope collector`, no --db) in a
process of its own, and a feeder that pushes batches the way an exporter does and remembers which the
collector acknowledged. Each fault case ends with an exact count: every acknowledged row stored once."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from gpuscope.core.embedded_pg import running_dsn
from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.core.listen import free_loopback_port
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.wire import Origin, encode_binary
from tests.commands import GPUSCOPE, token_file, wait_healthy

TOKEN = "fault-suite-token-0123456789"
GPUS = 4
ANSWER_TIMEOUT_S = 11.0  # an exporter's own: a request that takes longer is one the exporter never hears


@dataclass
class Collector:
    """`gpuscope collector` on 127.0.0.1 over an embedded database in `data_dir`, as an operator runs it."""

    data_dir: Path
    port: int
    extra: tuple[str, ...] = ()
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @classmethod
    def start(cls, data_dir: Path, *extra: str, timeout: float = 60.0) -> Collector:
        collector = cls(data_dir, free_loopback_port(), extra)
        collector.restart(timeout)
        return collector

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def restart(self, timeout: float = 60.0) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.chmod(0o711)  # as root the server runs as 'postgres' and must pass through
        tokens = token_file(self.data_dir / "ingest-token", TOKEN)
        self.log_path = self.data_dir.with_name(self.data_dir.name + ".log")  # beside it: its disk may fill
        with self.log_path.open("ab") as log:
            command = [*GPUSCOPE, "collector", "--data-dir", str(self.data_dir), "--no-health"]
            command += ["--listen", f"127.0.0.1:{self.port}", "--token-file", str(tokens), *self.extra]
            self.process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        wait_healthy(self.url, timeout=timeout, process=self.process)

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def stop(self, timeout: float = 15.0) -> float:
        """SIGTERM; seconds until it exited (SIGKILL past `timeout`, and the test fails)."""
        assert self.process is not None
        began = time.monotonic()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise AssertionError(f"the collector did not stop within {timeout:.0f} s of SIGTERM") from None
        return time.monotonic() - began

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "pgdata" / "postmaster.pid").read_text().split("\n", 1)[0])

    def dsn(self) -> str:
        return running_dsn(self.data_dir)

    def health(self) -> tuple[int, dict[str, Any]]:
        response = httpx.get(f"{self.url}/healthz", timeout=5)
        return response.status_code, response.json()

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path else ""


@dataclass(frozen=True)
class Answer:
    at: float  # time.monotonic() the request was sent
    took: float  # seconds until the answer (or the timeout)
    status: int  # 0: no answer (connection refused, reset, timed out)
    detail: str


@dataclass
class Feeder:
    """One node's exporter, reduced to what matters here: a batch of one snapshot (GPUS GPUs, a fresh
    timestamp) every `period`, each retried under its own sequence number until acknowledged."""

    url: str
    node: str = "fault-node"
    period: float = 0.05
    answers: list[Answer] = field(default_factory=list)
    acked_batches: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Feeder:
        self._thread = threading.Thread(target=self._run, name=f"feeder-{self.node}", daemon=True)
        self._thread.start()
        return self

    @property
    def acked_rows(self) -> int:
        return self.acked_batches * GPUS

    def stop(self, drain_s: float = 30.0) -> None:
        """No new batches; the one pending is retried until acknowledged (or the test fails)."""
        self._stop.set()
        assert self._thread is not None
        self._thread.join(drain_s)
        assert not self._thread.is_alive(), f"the last batch was not acknowledged within {drain_s:.0f} s"

    def answers_since(self, began: float) -> list[Answer]:
        return [a for a in list(self.answers) if a.at >= began]

    def _run(self) -> None:
        topology = build_topology(1, GPUS, 1, cluster="faults")
        node = topology[0]
        source = SimNodeSource(node, JobSchedule(topology, 1), 1)
        origin = Origin("faults", node.rack, self.node, "sim", str(uuid.uuid4()))
        seq = 0
        with httpx.Client(timeout=ANSWER_TIMEOUT_S) as client:
            while not self._stop.is_set():
                seq += 1
                ts = time.time()
                gpus, _ = source.read(ts)
                body = encode_binary(origin, seq, [Snapshot(ts=ts, gpus=gpus, ports=[])])
                while not self._send(client, body):  # after a stop too: an exporter never drops a batch
                    time.sleep(0.1)
                self.acked_batches += 1
                self._stop.wait(self.period)

    def _send(self, client: httpx.Client, body: bytes) -> bool:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": BINARY_CONTENT_TYPE}
        began = time.monotonic()
        try:
            response = client.post(f"{self.url}/api/v1/samples", content=body, headers=headers)
            status, detail = response.status_code, response.text[:300]
        except httpx.HTTPError as exc:
            status, detail = 0, type(exc).__name__
        self.answers.append(Answer(began, time.monotonic() - began, status, detail))
        if status not in (0, 200, 503):
            raise AssertionError(f"unexpected answer {status}: {detail}")
        return status == 200


def gone(pid: int) -> bool:
    """No such process, not even a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def postgres_pids(pgdata: Path) -> list[int]:
    """Every process working in this data directory (the postmaster and its children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if Path(os.readlink(entry / "cwd")) == pgdata.resolve():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found
