"""Shared fixtures: one real PostgreSQL server for the session, a fresh database per test."""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import EmbeddedPostgres, PostgresNotFound, find_pg_bin
from tests.processes import RunningCollector, running_collector

# Durability is not under test here; these make CREATE DATABASE and commits cheap.
FAST_UNSAFE = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}
_database_numbers = itertools.count()


# Tests that share something of the host's own run in one process under `pytest -n` (make test): the
# Slurm clusters' cgroups are the host's, one tree per node name. Every other file is its own group, so
# its module fixtures are built once (as --dist loadfile, which cannot join files).
SHARED_HOST_GROUPS = {"slurm": "slurm"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(item.path).relative_to(Path(__file__).parent).parts
        group = SHARED_HOST_GROUPS.get(parts[0], "/".join(parts))
        item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture(scope="session")
def postgres() -> Iterator[EmbeddedPostgres]:
    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        # Never skip: the suite is about a real database (and CI=true must fail loudly anyway).
        pytest.exit(f"PostgreSQL is required for the tests: {exc}", returncode=3)
    with running_postgres("gpuscope-test-pg-") as server:
        yield server


@contextlib.contextmanager
def running_postgres(prefix: str) -> Iterator[EmbeddedPostgres]:
    """A private PostgreSQL server in a temporary directory, removed afterwards."""
    with server_dir(prefix) as data_dir:
        server = EmbeddedPostgres(data_dir, settings=FAST_UNSAFE)
        server.start()
        try:
            yield server
        finally:
            server.stop()


@contextlib.contextmanager
def server_dir(prefix: str) -> Iterator[Path]:
    """A temporary directory for an embedded server's data, removed afterwards. Not pytest's tmp_path:
    its parents are private to us, and as root the server runs as 'postgres', which must pass through."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o711)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def dsn(postgres: EmbeddedPostgres) -> str:
    """A new, empty database with the schema applied."""
    return new_database(postgres)


def new_database(postgres: EmbeddedPostgres) -> str:
    name = f"test_{os.getpid()}_{next(_database_numbers)}"
    with psycopg.connect(postgres.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    database_dsn = postgres.dsn.rsplit("/", 1)[0] + "/" + name
    migrate(database_dsn)
    return database_dsn


@pytest.fixture
def collector(dsn: str) -> Iterator[RunningCollector]:
    """A real collector (uvicorn on 127.0.0.1, ephemeral port) over a fresh database."""
    with running_collector(dsn) as running:
        yield running


def count_rows(dsn: str, table: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()
        assert row is not None
        return int(row[0])


def require_tool(name: str) -> str:
    """Path of a command-line tool; skip when absent locally, fail when absent in CI (CI=true)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{name} is required in CI but not installed (.ci/run must install it)")
        pytest.skip(f"{name} not installed")
    return path
