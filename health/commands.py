"""Runs a command for the health loop (a scheduler's client, a site's validation check): no shell, stdout
and stderr together, a time limit after which it is killed, and killed too when its caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

OUTPUT_TAIL = 400  # characters of a command's output kept with its outcome (a repair's, a validation's)


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: it did not start, or ran past its time (`trouble` says which)
    output: str  # what it printed, stripped
    trouble: str = ""  # "cannot run: <why>" or "no result in <N> s"

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def tail(self) -> str:
        """The last OUTPUT_TAIL characters printed, after ": ", to follow an outcome's words; empty if it
        printed nothing."""
        tail = self.output[-OUTPUT_TAIL:]
        return f": {tail}" if tail else ""


async def run_command(argv: Sequence[str], timeout_s: float) -> Ran:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
    except OSError as exc:
        return Ran(None, "", f"cannot run: {exc.strerror or exc}")
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return Ran(None, "", f"no result in {timeout_s:.0f} s")
    except BaseException:  # cancelled (its node's shard went to another collector): the command goes too
        if proc.returncode is None:
            proc.kill()
            await asyncio.shield(proc.wait())
        raise
    return Ran(proc.returncode, out.decode(errors="replace").strip())
