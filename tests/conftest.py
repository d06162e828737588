"""Shared fixtures: one real PostgreSQL server for the session, a fresh database per test."""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import shutil
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
# its module fixtures are built once (as --dist loadfile, which cannot join files), and a module's tests
# that read what its earlier ones left (the ingest fuzz's answers, the demo's straggler) see it.
SHARED_HOST_GROUPS = {"slurm": "slurm"}

# What makes a test slow, and so not `fast` (pytest -m fast: the unit-level tests, in a minute or two):
# a real PostgreSQL (every database fixture stands on one), a browser, a Slurm cluster, processes of its
# own. Seen in the fixtures a test uses (all of them, through each other), in what its module imports to
# start processes with, and in the folders of whole systems (simulated clusters, benchmarks, faults).
HEAVY_FIXTURES = frozenset({"postgres", "private_postgres", "browser", "slurm_cluster_factory",
                            "module_slurm_cluster_factory", "timescale_dsn", "fake_kubelet"})  # fmt: skip
PROCESS_STARTERS = frozenset({"subprocess", "tests.commands", "gpuscope.core.embedded_pg", "gpuscope.bench.browser"})
HEAVY_FOLDERS = frozenset({"slurm", "faults", "scaleout", "timescale", "bench", "deploy", "patroni"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = Path(item.path).relative_to(Path(__file__).parent).parts
        item.add_marker(pytest.mark.xdist_group(group_of(parts)))
        if is_fast(item, parts):
            item.add_marker(pytest.mark.fast)


def group_of(parts: tuple[str, ...]) -> str:
    """The group of a test file, by its path under tests/."""
    return SHARED_HOST_GROUPS.get(parts[0], "/".join(parts))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """--dist loadgroup, grouped by path: xdist reads the groups off the test ids, with the marker's name
    appended to them in each process, which pytest 9 no longer lets it do (its tests then went to either
    process, a module's fixtures built in both). The same groups, read off the paths here."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class GroupsByPath(LoadScopeScheduling):  # a scope is what one process runs in a row, in order
        def _split_scope(self, nodeid: str) -> str:
            path = Path(nodeid.split("::", 1)[0])
            return group_of(path.parts[1:] if path.parts[0] == "tests" else path.parts)

    return GroupsByPath(config, log)


def is_fast(item: pytest.Item, parts: tuple[str, ...]) -> bool:
    uses = set(getattr(item, "fixturenames", ()))
    in_heavy_folder = len(parts) > 1 and (parts[0] in HEAVY_FOLDERS or "bench" in parts[-1])
    module = getattr(item, "module", None)
    return not (uses & HEAVY_FIXTURES or in_heavy_folder or (module is not None and starts_processes(module)))


@functools.cache
def starts_processes(module: types.ModuleType) -> bool:
    """Whether a test module imports something that starts processes (itself, or through a helper)."""
    for value in vars(module).values():
        origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
        if origin in PROCESS_STARTERS:
            return True
    return False


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
