"""The embedded PostgreSQL: starts on loopback, survives a restart with its data, leaves no process."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from gpuscope.core.embedded_pg import EmbeddedPostgres, PostgresNotFound, find_pg_bin
from tests.collector.helpers import postmaster_pids


@pytest.fixture
def data_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpuscope-test-embedded-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_start_restart_keeps_data_and_stop_leaves_nothing(data_dir: Path) -> None:
    pg = EmbeddedPostgres(data_dir, settings={"fsync": "off"})
    with pg:
        assert pg.dsn.startswith("postgresql://gpuscope:") and "@127.0.0.1:" in pg.dsn
        assert "***" in pg.redacted_dsn and pg.dsn.split(":")[2].split("@")[0] not in pg.redacted_dsn
        with psycopg.connect(pg.dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
            listen = conn.execute("SHOW listen_addresses").fetchone()
        assert listen == ("127.0.0.1",)
        assert postmaster_pids(pg.pgdata)
    assert postmaster_pids(pg.pgdata) == []
    with EmbeddedPostgres(data_dir, settings={"fsync": "off"}) as again, psycopg.connect(again.dsn) as conn:
        assert conn.execute("SELECT x FROM kept").fetchone() == (42,)
    assert (data_dir / "pg-password").stat().st_mode & 0o077 == 0


def test_password_is_required(data_dir: Path) -> None:
    with EmbeddedPostgres(data_dir, settings={"fsync": "off"}) as pg:
        no_password = pg.dsn.replace(pg.dsn.split(":")[2].split("@")[0], "wrong")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(no_password)


def test_missing_binaries_say_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("GPUSCOPE_PG_BIN", str(tmp_path))
    with pytest.raises(PostgresNotFound, match="apt-get install postgresql"):
        find_pg_bin(debian_root=str(tmp_path))


def test_env_override_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_pg_bin()
    monkeypatch.setenv("GPUSCOPE_PG_BIN", str(real))
    monkeypatch.setenv("PATH", os.defpath)
    assert find_pg_bin(debian_root="/nonexistent") == real
