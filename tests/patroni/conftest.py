"""The `patroni_cluster` fixture: a real three-node Patroni cluster (tests/patroni/cluster.py). Where
Patroni, etcd or PostgreSQL are missing it fails under CI=true, which must run these tests (.ci/run
installs them), and skips elsewhere."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.core.embedded_pg import PostgresNotFound, find_pg_bin
from tests.conftest import require_tool
from tests.patroni.cluster import PatroniCluster


def require_cluster_tools() -> None:
    require_tool("patroni")
    require_tool("etcd")
    try:
        find_pg_bin()
    except PostgresNotFound as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def patroni_cluster() -> Iterator[PatroniCluster]:
    """A started cluster, shared by a module's tests (a start costs 15-30 s): a test that kills a node
    leaves the cluster for the next one to heal (cluster.wait_healthy(), restart_patroni())."""
    require_cluster_tools()
    # not pytest's tmp_path: its parents are private to root, and the nodes run as 'postgres'
    root = Path(tempfile.mkdtemp(prefix="gpuscope-patroni-"))
    cluster = PatroniCluster(root)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
