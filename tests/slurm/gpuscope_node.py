"""A test Slurm node with gpuscope's Slurm attribution on it, read back as the exporter reads it.

deploy(cluster), before cluster.start(): the fake nvidia-smi (8 GPUs, NVML's order not the minors'),
and the prolog and epilog installed as deploy/slurm/README.md says. attribution(cluster): what the
exporter's own SlurmJobs makes of the mapping files, by GPU UUID.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpuscope.exporter.jobs.slurm import SlurmJobs, configured_mapping_dir
from gpuscope.exporter.snapshot import JobInfo
from tests.slurm import fake_nvidia_smi
from tests.slurm.cluster import SlurmCluster
from tests.slurm.readme_install import install

# The minor number of NVML's GPU i: NVML enumerates by PCI address, which need not follow the minors.
NVML_ORDER = [2, 3, 0, 1, 6, 7, 4, 5]
GPUS = fake_nvidia_smi.gpus_in_nvml_order(NVML_ORDER)


def deploy(cluster: SlurmCluster) -> None:
    tools = cluster.root / "tools"
    fake_nvidia_smi.install(tools, GPUS)
    cluster.settings |= install(cluster.root, map_dir(cluster), tools).settings


def map_dir(cluster: SlurmCluster) -> Path:
    return cluster.root / "map"


def mapping_files(cluster: SlurmCluster) -> dict[str, str]:
    """File name -> first line, as the prolog left them."""
    directory = map_dir(cluster)
    if not directory.is_dir():
        return {}
    return {p.name: p.read_text().strip() for p in sorted(directory.iterdir()) if not p.name.startswith(".")}


def wait_for_files(cluster: SlurmCluster, count: int) -> dict[str, str]:
    """Until the prologs have written `count` files (salloc and sbatch return before the prolog ends)."""

    def written() -> dict[str, str] | None:
        files = mapping_files(cluster)
        return files if len(files) >= count else None

    return cluster.wait_for(written, f"{count} mapping files in {map_dir(cluster)}", timeout=10)


def attribution(cluster: SlurmCluster, clock: Callable[[], float] = time.time) -> dict[str, JobInfo]:
    """GPU UUID -> job, from the exporter's SlurmJobs reading the directory gpuscope.conf names."""
    jobs = SlurmJobs(configured_mapping_dir(cluster.conf), clock=clock)
    found = jobs.assign(tuple(gpu.identity() for gpu in GPUS), clock())
    return {GPUS[index].uuid: job for index, job in found.items()}
