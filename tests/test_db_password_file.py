"""--db-password-file: the database password reaches PostgreSQL but never the command line, which every
local user can read (ps, /proc/PID/cmdline)."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.tokens import TokenError, dsn_with_password_file
from tests.commands import GPUSCOPE, token_file, wait_healthy


def split_password(dsn: str) -> tuple[str, str]:
    params = conninfo_to_dict(dsn)
    password = str(params.pop("password"))
    return make_conninfo(**{k: str(v) for k, v in params.items()}), password


def test_the_collector_connects_with_the_password_from_a_file(dsn: str, tmp_path: Path) -> None:
    bare_dsn, password = split_password(dsn)
    port = free_loopback_port()
    collector = subprocess.Popen(
        [
            *GPUSCOPE,
            "collector",
            "--db",
            bare_dsn,
            "--db-password-file",
            str(token_file(tmp_path / "db-password", password)),
            "--listen",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(tmp_path),
            "--no-alerts",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", timeout=60, process=collector)
        command_line = Path(f"/proc/{collector.pid}/cmdline").read_bytes().decode()
        assert password not in command_line
    finally:
        collector.send_signal(signal.SIGTERM)
        _, stderr = collector.communicate(timeout=30)
    assert password not in stderr


def test_a_wrong_password_in_the_file_stops_the_start(dsn: str, tmp_path: Path) -> None:
    bare_dsn, _ = split_password(dsn)
    wrong = token_file(tmp_path / "db-password", "not-the-password")
    result = subprocess.run(
        [*GPUSCOPE, "collector", "--db", bare_dsn, "--db-password-file", str(wrong), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "password authentication failed" in result.stderr
    assert "not-the-password" not in result.stderr


def test_a_password_in_both_places_is_refused(tmp_path: Path) -> None:
    password_file = token_file(tmp_path / "db-password", "s3cret")
    with pytest.raises(TokenError, match="keep only the file"):
        dsn_with_password_file("postgresql://u:other@127.0.0.1/db", password_file)
    merged = dsn_with_password_file("postgresql://u@127.0.0.1/db", password_file)
    assert conninfo_to_dict(merged)["password"] == "s3cret"
    assert dsn_with_password_file("postgresql://u@127.0.0.1/db", None) == "postgresql://u@127.0.0.1/db"
