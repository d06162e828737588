"""A data directory's postmaster.pid, told apart: a live server's, which is never touched, or a stale one.

PostgreSQL itself ignores a lock file whose process is gone. It refuses to start when the process
number still exists, even when it now belongs to some other program (numbers are reused, often at
once in a container) or to the old server's unreaped zombie, and when the old server is still shutting
down (its parent, a collector, was killed: the server got its parent-death signal and is finishing a
fast shutdown). The first two are removed here; the third is waited for; a server that keeps running
is another owner's: an error.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

LOCK_FILE = "postmaster.pid"
SHUTDOWN_WAIT_S = 15.0  # a fast shutdown (parent-death SIGINT) ends in a few seconds


class DataDirectoryInUse(RuntimeError):
    pass


def clear_stale_lock(pgdata: Path, wait_s: float = SHUTDOWN_WAIT_S) -> None:
    pid = _locking_pid(pgdata / LOCK_FILE)
    if pid is None:
        return
    deadline = time.monotonic() + wait_s
    while _is_postmaster_of(pid, pgdata):
        if time.monotonic() > deadline:
            raise DataDirectoryInUse(
                f"another PostgreSQL server (pid {pid}) runs on {pgdata}: is another collector or demo using "
                "this data directory? Stop it, or give this one its own --data-dir."
            )
        time.sleep(0.2)
    if _exists(pid):  # the number belongs to another program now, or to an unreaped (zombie) server
        log.warning("removing the stale %s of %s: pid %d is not a PostgreSQL server there", LOCK_FILE, pgdata, pid)
        (pgdata / LOCK_FILE).unlink(missing_ok=True)


def _locking_pid(path: Path) -> int | None:
    try:
        first = path.read_text(errors="replace").split("\n", 1)[0].strip()
    except OSError:
        return None
    return int(first) if first.isdigit() and int(first) > 0 else None


def _exists(pid: int) -> bool:
    """Anything with this number, a zombie included (PostgreSQL's own check, kill(pid, 0), sees those)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def _alive(pid: int) -> bool:
    return _exists(pid) and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] == "Z"  # exited, not yet reaped: holds nothing


def _is_postmaster_of(pid: int, pgdata: Path) -> bool:
    """A live PostgreSQL process working in this data directory (a server chdirs into it)."""
    if not _alive(pid):
        return False
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
        cwd = os.readlink(f"/proc/{pid}/cwd")
    except OSError:  # no /proc, or not ours to read: assume the worst, it is the server
        return True
    return "postgres" in Path(executable.removesuffix(" (deleted)")).name and Path(cwd) == pgdata.resolve()
