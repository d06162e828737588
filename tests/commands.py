"""`gpuscope` commands in processes of their own, as a user starts them, for tests that kill, signal or
count processes (in-process servers: tests/processes.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuscope.core.processes import stop_process  # noqa: F401 (re-exported: the tests stop their processes through tests.commands)
from tests.waiting import eventually

GPUSCOPE = [sys.executable, "-m", "gpuscope.cli"]


def token_file(path: Path, token: str) -> Path:
    """`token` in a file at `path`, readable by its owner only (as the commands insist)."""
    path.write_text(token + "\n")
    path.chmod(0o600)
    return path


def wait_healthy(url: str, *, timeout: float, process: subprocess.Popen[Any] | None = None) -> None:
    """Until GET `url`/healthz answers 200; fails at once if `process` exits first."""

    def healthy() -> bool:
        if process is not None and process.poll() is not None:
            pytest.fail(f"exited with status {process.returncode} before {url}/healthz answered")
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200

    eventually(healthy, timeout=timeout, interval=0.1, ignoring=(httpx.HTTPError,), what=f"{url}/healthz to answer 200")


def start_collector(
    dsn: str, port: int, token_file: Path, *extra: str, timeout: float = 30.0
) -> subprocess.Popen[bytes]:
    """`gpuscope collector` in a process of its own, on 127.0.0.1:port; returns once it is healthy."""
    process = subprocess.Popen(
        [*GPUSCOPE, "collector", "--db", dsn, "--listen", f"127.0.0.1:{port}", "--token-file", str(token_file), *extra],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout=timeout, process=process)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process
