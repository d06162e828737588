"""A validation command whose caller is cancelled (its node's shard went to another collector) is killed,
not left running beside the new owner's."""

from __future__ import annotations

import asyncio
import contextlib
import os
from pathlib import Path

from gpuscope.health.commands import run_command
from tests.waiting import eventually_async


def test_a_cancelled_command_is_killed(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    async def scenario() -> int:
        task = asyncio.create_task(run_command(["sh", "-c", f"echo $$ > {pid_file}; exec sleep 30"], 60))
        await eventually_async(lambda: pid_file.exists() and pid_file.read_text().strip(), what="started", timeout=10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return int(pid_file.read_text())

    pid = asyncio.run(scenario())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return
    raise AssertionError(f"the command (pid {pid}) outlived its cancelled caller")
