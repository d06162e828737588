"""postmaster.pid left behind: a number now used by another program (or an unreaped zombie) no longer
blocks a start; a live server's file is never touched, and a second server on the same directory is
refused in one sentence."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.pg_lockfile import DataDirectoryInUse, clear_stale_lock
from tests.conftest import server_dir


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with server_dir("gpuscope-test-lockfile-") as path:
        yield path


def lock_file_naming(pgdata: Path, pid: int) -> Path:
    """A postmaster.pid as the server writes it, first line its pid, second its data directory."""
    path = pgdata / "postmaster.pid"
    path.write_text(f"{pid}\n{pgdata}\n1764300000\n5432\n\n127.0.0.1\n  5432001     0\nready   \n")
    return path


def test_a_reused_pid_no_longer_blocks_the_start(data_dir: Path) -> None:
    server = EmbeddedPostgres(data_dir, settings={"fsync": "off"})
    server.start()
    server.stop()
    # The old server's number, now another program's, of the server's own user (as in a container where
    # everything runs as one user; another user's process PostgreSQL tells apart itself).
    as_server_user = {"user": pwd.getpwnam("postgres").pw_uid} if os.geteuid() == 0 else {}
    with subprocess.Popen(["sleep", "30"], **as_server_user) as other:  # type: ignore[call-overload]
        try:
            lock_file_naming(server.pgdata, other.pid)
            server.start()  # PostgreSQL alone: 'lock file "postmaster.pid" already exists'
            try:
                with psycopg.connect(server.dsn) as conn:
                    assert conn.execute("SELECT 1").fetchone() == (1,)
            finally:
                server.stop()
        finally:
            other.kill()


def test_a_zombie_holds_nothing(tmp_path: Path) -> None:
    zombie = subprocess.Popen(["true"])
    try:
        while Path(f"/proc/{zombie.pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z":
            pass  # exited, not reaped (we never wait() until the end)
        lock = lock_file_naming(tmp_path, zombie.pid)
        clear_stale_lock(tmp_path)
        assert not lock.exists()
    finally:
        zombie.wait()


def test_a_live_servers_lock_file_is_never_removed(data_dir: Path) -> None:
    with EmbeddedPostgres(data_dir, settings={"fsync": "off"}) as running:
        lock = running.pgdata / "postmaster.pid"
        before = lock.read_text()
        with pytest.raises(DataDirectoryInUse, match=r"another PostgreSQL server .* runs on"):
            clear_stale_lock(running.pgdata, wait_s=0.5)
        assert lock.read_text() == before
        with psycopg.connect(running.dsn) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
