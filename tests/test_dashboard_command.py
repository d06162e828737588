"""`gpuscope dashboard` as an operator runs it: served by gunicorn worker processes (each with its own
database pool), stopped by Ctrl-C or SIGTERM with status 0, its login and body cap in force; and
--data-dir, which finds the embedded database of a collector running with that data directory."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres, running_dsn
from gpuscope.core.listen import free_loopback_port
from gpuscope.dashboard.auth import hash_password
from tests.collector.helpers import postmaster_pids
from tests.commands import GPUSCOPE, stop_process, wait_healthy
from tests.conftest import server_dir
from tests.waiting import eventually

CALLBACK = "/_dash-update-component"
JSON = {"Content-Type": "application/json"}
# libpq names the dashboard's connections so (PGAPPNAME): pg_stat_activity tells them from others.
APPLICATION = "gpuscope-test-dashboard"


def start_dashboard(*args: str) -> tuple[subprocess.Popen[str], str]:
    """`gpuscope dashboard` on a free loopback port, once it answers HTTP: the process, its URL."""
    url = f"http://127.0.0.1:{free_loopback_port()}"
    process = subprocess.Popen(
        [*GPUSCOPE, "dashboard", "--listen", url.removeprefix("http://"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PGAPPNAME": APPLICATION},
    )

    def answers() -> bool:
        if process.poll() is not None:
            pytest.fail(f"the dashboard exited with {process.returncode}: {process.communicate()[0]}")
        return bool(httpx.get(url, timeout=5).status_code)

    try:
        eventually(answers, timeout=60, interval=0.1, ignoring=(httpx.HTTPError,), what=f"{url}/ to answer")
    except BaseException:
        stop_process(process)
        raise
    return process, url


def stopped_by(process: subprocess.Popen[str], signum: signal.Signals, within_s: float = 10.0) -> str:
    """Send `signum`; the process must exit within `within_s` seconds. Its output."""
    process.send_signal(signum)
    try:
        output, _ = process.communicate(timeout=within_s)
    except subprocess.TimeoutExpired:
        process.kill()
        pytest.fail(f"still running {within_s:.0f} s after {signum.name}: {process.communicate()[0]}")
    return output


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:  # the field after the state is the parent's pid
            found.append(int(stat.parent.name))
    return found


def sessions(dsn: str) -> int:
    """The dashboard's connections to this database."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            (APPLICATION,),
        ).fetchone()
        assert row is not None
        return int(row[0])


def test_gunicorn_workers_serve_it_and_ctrl_c_stops_it(dsn: str) -> None:
    process, url = start_dashboard("--db", dsn)
    try:
        answer = httpx.get(url, timeout=10)
        assert answer.status_code == 200
        assert answer.headers["server"].startswith("gunicorn"), answer.headers
        eventually(lambda: len(children(process.pid)) == 2, timeout=30, what="the 2 workers --workers defaults to")
        # each worker opened its own read pool after the fork (of one connection to begin with)
        eventually(lambda: sessions(dsn) == 2, timeout=30, what="one database session per worker")
        output = stopped_by(process, signal.SIGINT)
    finally:
        stop_process(process)
    assert process.returncode == 0, output
    assert f"gpuscope dashboard on {url}" in output
    assert "Traceback" not in output
    eventually(lambda: sessions(dsn) == 0, timeout=10, what="the workers' sessions to close")


def test_login_and_body_cap_hold_under_gunicorn_and_sigterm_stops_it(dsn: str, tmp_path: Path) -> None:
    users = tmp_path / "users"
    users.write_text(f"ada:{hash_password('correct horse', iterations=1000)}\n")
    process, url = start_dashboard(
        "--db", dsn, "--workers", "1", "--basic-auth-file", str(users), "--max-body-bytes", "1000"
    )
    try:
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, auth=("ada", "wrong"), timeout=10).status_code == 401
        assert httpx.get(url, auth=("ada", "correct horse"), timeout=10).status_code == 200
        body = b'{"pad": "' + b"x" * 2000 + b'"}'
        declared = httpx.post(url + CALLBACK, content=body, headers=JSON)  # refused before the login is checked
        assert declared.status_code == 413, declared.text
        login = ("ada", "correct horse")
        chunked = httpx.post(url + CALLBACK, content=iter([body[:1000], body[1000:]]), headers=JSON, auth=login)
        assert chunked.request.headers["Transfer-Encoding"] == "chunked"
        assert chunked.status_code == 413, chunked.text
        output = stopped_by(process, signal.SIGTERM)
    finally:
        stop_process(process)
    assert process.returncode == 0, output
    assert "(login required)" in output


@pytest.fixture
def data_dir() -> Iterator[Path]:
    with server_dir("gpuscope-test-data-dir-") as path:
        yield path


def test_data_dir_finds_a_running_collectors_embedded_database(data_dir: Path) -> None:
    collector_url = f"http://127.0.0.1:{free_loopback_port()}"
    collector = subprocess.Popen(
        [*GPUSCOPE, "collector", "--no-alerts", "--data-dir", str(data_dir), "--listen", collector_url[7:]],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_healthy(collector_url, timeout=120, process=collector)
        recorded = (data_dir / "pg-dsn").read_text()
        assert recorded.startswith("postgresql://gpuscope@127.0.0.1:"), "the address, without the password"
        assert (data_dir / "pg-dsn").stat().st_mode & 0o077 == 0
        dashboard, _ = start_dashboard("--data-dir", str(data_dir), "--workers", "1")
        try:
            # connected to the collector's database: the one the data directory's files name
            eventually(lambda: sessions(running_dsn(data_dir)) == 1, timeout=30, what="the dashboard's session")
        finally:
            stop_process(dashboard)
    finally:
        stop_process(collector)

    # the collector's PostgreSQL stops after it (a fast shutdown, asked for by the parent-death signal)
    eventually(lambda: postmaster_pids(data_dir) == [], timeout=30, what="the embedded PostgreSQL to stop")
    result = subprocess.run(
        [*GPUSCOPE, "dashboard", "--data-dir", str(data_dir), "--listen", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"gpuscope dashboard: error: no database is running in {data_dir} (nothing answers at "
        f"{recorded.strip()}): start `gpuscope collector --data-dir {data_dir}` (without --db) first"
    ], result.stderr


def test_a_restarted_embedded_database_keeps_its_address(data_dir: Path) -> None:
    """So a dashboard started with --data-dir reconnects after the collector restarts."""
    with EmbeddedPostgres(data_dir, settings={"fsync": "off"}) as first:
        port = first.port
    with EmbeddedPostgres(data_dir, settings={"fsync": "off"}) as second:
        assert second.port == port
