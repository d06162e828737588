"""Chooses job attribution from --jobs: slurm, none, or auto (Slurm when the node shows signs of it)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    pids_of: Callable[[int], list[int]] | None = _method(source, "running_pids")
    mig_pids_of: Callable[[int], dict[str, list[int]]] | None = _method(source, "mig_running_pids")
    log.info("jobs: Slurm (mapping files in %s%s)", mapping_dir, ", NVML processes" if pids_of else "")
    return SlurmJobs(mapping_dir, pids_of=pids_of, cgroup_root=cgroup_root, mig_pids_of=mig_pids_of)


def _method(source: Source, name: str) -> Any | None:
    """The source's (or one of its parts') bound method `name`, if it has one."""
    for part in getattr(source, "parts", (source,)):
        method = getattr(part, name, None)
        if method is not None:
            return method
    return None
