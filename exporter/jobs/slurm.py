"""Slurm job attribution, off the scrape path.

1. Mapping files written by the prolog (deploy/slurm/prolog.sh): one file per GPU in a directory,
   named by GPU UUID (preferred: indices can disagree with device minor numbers) or index, whose first
   line is "JOBID [USER]". A file whose job no longer has a cgroup is stale (an epilog that never ran)
   and is ignored, so a dead job does not look alive.
2. Otherwise, the GPU's compute processes (from NVML): the Slurm job in /proc/PID/cgroup, else
   SLURM_JOB_ID in /proc/PID/environ. Checked every PROCESS_EVERY cycles, since it reads /proc.

On a MIG node Slurm allocates MIG devices, not GPUs, and names them by their own UUIDs ("MIG-...", in
CUDA_VISIBLE_DEVICES). Each MIG device is attributed the same two ways (assign_mig): a mapping file
named by its MIG UUID, else the processes NVML lists on that MIG device. These add a job per MIG device;
a GPU's own attribution (assign) is unchanged by them.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from gpuscope.exporter.jobs.base import JobInfo
from gpuscope.exporter.snapshot import GpuIdentity
from gpuscope.exporter.sources.errors import LogOnce

log = logging.getLogger(__name__)

DEFAULT_MAPPING_DIR = Path("/run/gpuscope/slurm")
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
PROCESS_EVERY = 10
JOB_IN_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
JOB_ID = re.compile(r"^\d+(?:_\d+)?$")  # 1234, or an array task 1234_7


class SlurmJobs:
    def __init__(
        self,
        mapping_dir: Path = DEFAULT_MAPPING_DIR,
        pids_of: Callable[[int], list[int]] | None = None,
        proc_root: Path = Path("/proc"),
        cgroup_root: Path = DEFAULT_CGROUP_ROOT,
        mig_pids_of: Callable[[int], dict[str, list[int]]] | None = None,
    ) -> None:
        self._mapping_dir = mapping_dir
        self._pids_of = pids_of
        self._mig_pids_of = mig_pids_of  # GPU index -> MIG device UUID -> PIDs (NvmlSource.mig_running_pids)
        self._proc_root = proc_root
        self._cgroup_root = cgroup_root
        self._log_once = LogOnce(log)
        self._cycle = 0
        self._from_processes: dict[int, JobInfo] = {}
        self._mig_cycle = 0
        self._mig_from_processes: dict[str, JobInfo] = {}

    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        mapped = self._from_mapping(gpus)
        if self._pids_of is not None and self._cycle % PROCESS_EVERY == 0:
            self._from_processes = self._scan_processes(gpus)
        self._cycle += 1
        return {**self._from_processes, **mapped}  # the prolog's word wins over the process scan

    def assign_mig(self, migs: Mapping[int, tuple[str, ...]], now: float) -> dict[str, JobInfo]:
        """MIG device UUID -> its job, for the MIG devices of `migs` (GPU index -> its MIG UUIDs)."""
        known = {uuid for uuids in migs.values() for uuid in uuids}
        mapped = self._mig_from_mapping(known)
        if self._mig_pids_of is not None and self._mig_cycle % PROCESS_EVERY == 0:
            self._mig_from_processes = self._scan_mig_processes(migs)
        self._mig_cycle += 1
        # A MIG device destroyed since the last scan is gone from `known`: its job goes with it.
        from_processes = {uuid: job for uuid, job in self._mig_from_processes.items() if uuid in known}
        return {**from_processes, **mapped}  # the prolog's word wins over the process scan

    def _from_mapping(self, gpus: tuple[GpuIdentity, ...]) -> dict[int, JobInfo]:
        found: dict[int, JobInfo] = {}
        if not self._mapping_dir.is_dir():
            return found
        for gpu in gpus:
            for name in _file_names((gpu.uuid, str(gpu.index))):  # uuid "": not known (a GPU not opened)
                info = self._read_mapping(self._mapping_dir / name)
                if info is not None:
                    found[gpu.index] = info
                    break
        return found

    def _mig_from_mapping(self, uuids: Iterable[str]) -> dict[str, JobInfo]:
        found: dict[str, JobInfo] = {}
        if not self._mapping_dir.is_dir():
            return found
        for uuid in _file_names(uuids):
            info = self._read_mapping(self._mapping_dir / uuid)
            if info is not None:
                found[uuid] = info
        return found

    def _read_mapping(self, path: Path) -> JobInfo | None:
        try:
            first = path.read_text(encoding="utf-8").splitlines()[0].split()
        except (FileNotFoundError, IndexError):
            return None
        except OSError as exc:
            self._log_once(("map", path), logging.WARNING, "cannot read %s: %s", path, exc.strerror)
            return None
        if not first or not JOB_ID.match(first[0]):
            self._log_once(("bad", path), logging.WARNING, "ignoring %s: first line must be 'JOBID [USER]'", path)
            return None
        if not self._job_alive(first[0]):
            self._log_once(
                ("stale", path, first[0]),
                logging.WARNING,
                "ignoring stale mapping %s: job %s has no cgroup (epilog did not run?)",
                path,
                first[0],
            )
            return None
        return JobInfo(first[0], first[1] if len(first) > 1 else None)

    def _job_alive(self, job_id: str) -> bool:
        """False only when Slurm's cgroup tree is visible and the job is not in it."""
        base = job_id.split("_", 1)[0]
        roots = [self._cgroup_root / "system.slice" / "slurmstepd.scope", self._cgroup_root / "slurm"]
        visible = [root for root in roots if root.is_dir()]
        if not visible:
            return True  # cannot tell: trust the prolog
        return any((root / f"job_{base}").is_dir() or any(root.glob(f"uid_*/job_{base}")) for root in visible)

    def _scan_processes(self, gpus: tuple[GpuIdentity, ...]) -> dict[int, JobInfo]:
        assert self._pids_of is not None
        found: dict[int, JobInfo] = {}
        for gpu in gpus:
            for pid in self._pids_of(gpu.index):
                info = self.job_of_pid(pid)
                if info is not None:
                    found[gpu.index] = info
                    break
        return found

    def _scan_mig_processes(self, migs: Mapping[int, tuple[str, ...]]) -> dict[str, JobInfo]:
        assert self._mig_pids_of is not None
        found: dict[str, JobInfo] = {}
        for index, uuids in migs.items():
            for uuid, pids in self._mig_pids_of(index).items():
                if uuid not in uuids:
                    continue  # created since the GPU was read: attributed once it is in a reading
                for pid in pids:
                    info = self.job_of_pid(pid)
                    if info is not None:
                        found[uuid] = info
                        break
        return found

    def job_of_pid(self, pid: int) -> JobInfo | None:
        process = self._proc_root / str(pid)
        job_id = None
        try:
            match = JOB_IN_CGROUP.search((process / "cgroup").read_text())
            job_id = match.group(1) if match else None
            if job_id is None:
                environ = (process / "environ").read_bytes().split(b"\0")
                job_id = next((e[13:].decode() for e in environ if e.startswith(b"SLURM_JOB_ID=")), None)
        except OSError:
            return None  # the process ended, or we may not look
        if job_id is None:
            return None
        return JobInfo(job_id, _owner(process))


def _file_names(names: Iterable[str]) -> list[str]:
    """The names that can be a file of the mapping directory: not empty (an identity not known), no
    path separator (NVML before R470 named MIG devices "MIG-GPU-<uuid>/<gi>/<ci>"), not "." or ".."."""
    return [name for name in names if name and "/" not in name and name not in (".", "..")]


def _owner(process: Path) -> str | None:
    try:
        uid = os.stat(process).st_uid
        return pwd.getpwuid(uid).pw_name
    except (OSError, KeyError):
        return None
