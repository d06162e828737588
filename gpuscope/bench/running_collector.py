"""A real collector process (uvicorn) for a bench: on a loopback port, with a fresh ingest token."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.processes import stop_process


@dataclass(frozen=True)
class Collector:
    port: int
    token: str

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextmanager
def running_collector(dsn: str, data_dir: Path, workers: int = 1) -> Iterator[Collector]:
    token = secrets.token_urlsafe(24)
    token_file = data_dir / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    port = free_loopback_port()
    command = [sys.executable, "-m", "gpuscope.cli", "collector", "--db", dsn, "--listen", f"127.0.0.1:{port}"]
    command += ["--token-file", str(token_file), "--workers", str(workers)]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_healthy(port)
        yield Collector(port, token)
    finally:
        stop_process(process)


def _wait_healthy(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("the collector did not become healthy")
