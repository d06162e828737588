"""Stopping a child process the way every gpuscope launcher does: politely first, reaped either way."""

from __future__ import annotations

import subprocess
from typing import Any


def stop_process(process: subprocess.Popen[Any], timeout: float = 30.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds; reaped either way, each wait
    bounded by `timeout`."""
    if process.poll() is None:
        process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout)
