"""Fixtures that start a real one-node Slurm (tests/slurm/cluster.py). Where Slurm cannot run (not
installed, not root) they fail under CI=true, which must run these tests, and skip elsewhere."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.slurm.cluster import SlurmCluster, slurm_unavailable

ClusterFactory = Callable[..., SlurmCluster]


def require_slurm() -> None:
    reason = slurm_unavailable()
    if reason is None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason}; CI runs the Slurm tests (.ci/run installs Slurm)")
    pytest.skip(reason)


def _clusters() -> Iterator[ClusterFactory]:
    made: list[tuple[SlurmCluster, Path]] = []

    def make(gpus: Sequence[int] = (0, 1, 2, 3), start: bool = True, **options: Any) -> SlurmCluster:
        """A SlurmCluster(directory, gpus, **options), started unless start=False (to write files into
        cluster.root first); stopped and its directory removed afterwards."""
        require_slurm()
        # not pytest's tmp_path: its parents are private to root, and jobs may run as other users
        root = Path(tempfile.mkdtemp(prefix="gpuscope-slurm-"))
        root.chmod(0o755)
        cluster = SlurmCluster(root, gpus, **options)
        made.append((cluster, root))
        if start:
            cluster.start()
        return cluster

    try:
        yield make
    finally:
        for cluster, root in made:
            cluster.stop()
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def slurm_cluster_factory() -> Iterator[ClusterFactory]:
    """make(gpus=(0, 1, 2, 3), start=True, settings=..., cgroups=...) -> a cluster, for this test."""
    yield from _clusters()


@pytest.fixture(scope="module")
def module_slurm_cluster_factory() -> Iterator[ClusterFactory]:
    """As slurm_cluster_factory, shared by a module's tests (a start costs about a second)."""
    yield from _clusters()


@pytest.fixture
def slurm_cluster(slurm_cluster_factory: ClusterFactory) -> SlurmCluster:
    """A started one-node cluster with 4 fake GPUs (/dev/nvidia0-3 in order) and no prolog."""
    return slurm_cluster_factory()
