"""Chooses job attribution from --jobs: slurm, none, or auto (Slurm when the node shows signs of it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from gpuscope.exporter.jobs.base import JobSource
from gpuscope.exporter.jobs.slurm import DEFAULT_CGROUP_ROOT, SlurmJobs
from gpuscope.exporter.sources.base import Source

log = logging.getLogger(__name__)


def open_jobs(
    mode: str, source: Source, mapping_dir: Path, cgroup_root: Path = DEFAULT_CGROUP_ROOT
) -> JobSource | None:
    if mode == "none":
        return None
    slurm_signs = [mapping_dir, cgroup_root / "system.slice" / "slurmstepd.scope", cgroup_root / "slurm"]
    if mode == "auto" and not any(path.is_dir() for path in slurm_signs):
        log.info("jobs: no Slurm on this node (%s); no job attribution", ", ".join(map(str, slurm_signs)))
        return None
    pids_of = _running_pids(source)
    log.info("jobs: Slurm (mapping files in %s%s)", mapping_dir, ", NVML processes" if pids_of else "")
    return SlurmJobs(mapping_dir, pids_of=pids_of, cgroup_root=cgroup_root)


def _running_pids(source: Source) -> Callable[[int], list[int]] | None:
    for part in getattr(source, "parts", (source,)):
        running_pids = getattr(part, "running_pids", None)
        if running_pids is not None:
            return running_pids
    return None
