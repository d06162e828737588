"""Every way an HA guide writes the database's address starts a collector that ingests and reads:
target_session_attrs=read-write (which refused every host, the primary too, while the read pool asked
for read-only sessions at connect: the collector exited after 30 s) or =primary, several hosts of
which the first is down, a password file named by libpq's passfile, and the PG* environment."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.pools import open_read_pool
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.processes import running_collector


@contextmanager
def environment(**values: str) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def forms(dsn: str, tmp_path: Path) -> dict[str, tuple[str, dict[str, str]]]:
    """Each form as (--db, environment) for the database `dsn` names."""
    url = urlsplit(dsn)
    user, password, port, database = url.username, url.password, url.port, url.path.lstrip("/")
    assert user and password and port
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"127.0.0.1:{port}:{database}:{user}:{password}\n")
    passfile.chmod(0o600)  # libpq ignores a password file others can read
    down = free_loopback_port()  # nothing listens there
    return {
        "read-write": (f"{dsn}?target_session_attrs=read-write", {}),
        "primary": (
            f"host=127.0.0.1 port={port} dbname={database} user={user} password={password}"
            " target_session_attrs=primary",
            {},
        ),
        "several hosts": (
            f"postgresql://{user}:{password}@127.0.0.1:{down},127.0.0.1:{port}/{database}"
            "?target_session_attrs=read-write&connect_timeout=2",
            {},
        ),
        "passfile": (f"postgresql://{user}@127.0.0.1:{port}/{database}?passfile={passfile}", {}),
        "PG* environment": (
            f"dbname={database}",
            {"PGHOST": "127.0.0.1", "PGPORT": str(port), "PGUSER": user, "PGPASSWORD": password},
        ),
    }


def snapshot_at(ts: float) -> Snapshot:
    gpu = GpuIdentity(0, f"GPU-{uuid.uuid4()}", "NVIDIA H100", "00:01")
    return Snapshot(ts, (GpuReading(gpu, True, {"util_pct": 42.0}),), ())


@pytest.mark.parametrize("form", ["read-write", "primary", "several hosts", "passfile", "PG* environment"])
def test_each_form_of_the_address_ingests_and_reads(dsn: str, tmp_path: Path, form: str) -> None:
    db, env = forms(dsn, tmp_path)[form]
    with environment(**env), running_collector(db) as collector:
        origin = Origin("c", "r", f"node-{form}", "sim", str(uuid.uuid4()))
        push_binary(collector, origin, 0, [snapshot_at(time.time())])
        fleet = httpx.get(f"{collector.url}/api/v1/fleet", timeout=10)  # through the read pool
        assert fleet.status_code == 200, fleet.text
        assert fleet.json()["gpus_known"] == 1
        assert httpx.get(f"{collector.url}/healthz", timeout=10).json() == {"status": "ok"}


def test_the_read_pool_stays_read_only_under_read_write_targeting(dsn: str) -> None:
    pool = open_read_pool(f"{dsn}?target_session_attrs=read-write", max_size=1, timeout=5)
    try:
        with pool.connection() as conn, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
            conn.execute("CREATE TABLE written_by_a_reader (x int)")
    finally:
        pool.close()
