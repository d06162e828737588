"""Slurm job attribution, off the scrape path.

1. Mapping files written by the prolog (deploy/slurm/prolog.sh): one file per GPU in a directory,
   named by GPU UUID (preferred: indices can disagree with device minor numbers) or index, whose first
   line is "JOBID [USER] [account=A] [partition=P]". A file whose job no longer has a cgroup is stale
   (an epilog that never ran) and is ignored, so a dead job does not look alive (see _CgroupView).
   The directory is --slurm-mapping-dir, else map_dir= in gpuscope.conf (configured_mapping_dir).
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
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from gpuscope.exporter.jobs.base import JobInfo
from gpuscope.exporter.snapshot import GpuIdentity
from gpuscope.exporter.sources.errors import LogOnce

log = logging.getLogger(__name__)

DEFAULT_MAPPING_DIR = Path("/run/gpuscope/slurm")
DEFAULT_CGROUP_ROOT = Path("/sys/fs/cgroup")
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
PROCESS_EVERY = 10
JOB_IN_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
JOB_ID = re.compile(r"^\d+(?:_\d+)?$")  # 1234, or an array task 1234_7
# Where Slurm puts a job's cgroup, relative to the cgroup root: (its tree, the job's directory in it).
# cgroup v2 (CgroupPlugin=cgroup/v2): system.slice/slurmstepd.scope/job_<id>, and with several slurmd
# on one host system.slice/<node>_slurmstepd.scope/job_<id>. cgroup v1: <controller>/slurm/uid_<uid>/
# job_<id>; Slurm 22.05 names the tree slurm_<node> (seen: freezer/slurm_<node>/uid_0/job_<id>). The
# controllers: freezer (proctrack/cgroup), cpuset, memory, devices (task/cgroup), cpuacct.
SLURM_CGROUP_TREES = (
    ("system.slice/slurmstepd.scope", "job_{}"),
    ("system.slice/*_slurmstepd.scope", "job_{}"),
    ("*/slurm", "uid_*/job_{}"),
    ("*/slurm_*", "uid_*/job_{}"),
)
# The prolog writes a job's file before Slurm makes the job's cgroup: a file this young is not judged.
STALE_GRACE_S = 60.0


class SlurmJobs:
    def __init__(
        self,
        mapping_dir: Path = DEFAULT_MAPPING_DIR,
        pids_of: Callable[[int], list[int]] | None = None,
        proc_root: Path = Path("/proc"),
        cgroup_root: Path = DEFAULT_CGROUP_ROOT,
        mig_pids_of: Callable[[int], dict[str, list[int]]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._mapping_dir = mapping_dir
        self._clock = clock  # wall clock, as file times are
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
        cgroups = _CgroupView(self._cgroup_root)
        for gpu in gpus:
            for name in _file_names((gpu.uuid, str(gpu.index))):  # uuid "": not known (a GPU not opened)
                info = self._read_mapping(self._mapping_dir / name, cgroups)
                if info is not None:
                    found[gpu.index] = info
                    break
        return found

    def _mig_from_mapping(self, uuids: Iterable[str]) -> dict[str, JobInfo]:
        found: dict[str, JobInfo] = {}
        if not self._mapping_dir.is_dir():
            return found
        cgroups = _CgroupView(self._cgroup_root)
        for uuid in _file_names(uuids):
            info = self._read_mapping(self._mapping_dir / uuid, cgroups)
            if info is not None:
                found[uuid] = info
        return found

    def _read_mapping(self, path: Path, cgroups: _CgroupView) -> JobInfo | None:
        try:
            written = path.stat().st_mtime
            first = path.read_text(encoding="utf-8").splitlines()[0].split()
        except (FileNotFoundError, IndexError):
            return None
        except OSError as exc:
            self._log_once(("map", path), logging.WARNING, "cannot read %s: %s", path, exc.strerror)
            return None
        if not first or not JOB_ID.match(first[0]):
            self._log_once(("bad", path), logging.WARNING, "ignoring %s: first line must be 'JOBID [USER]'", path)
            return None
        if self._clock() - written > STALE_GRACE_S and not cgroups.may_be_alive(first[0]):
            self._log_once(
                ("stale", path, first[0]),
                logging.WARNING,
                "ignoring stale mapping %s: job %s has no cgroup (epilog did not run?)",
                path,
                first[0],
            )
            return None
        return _parse_mapping_line(first)

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


def _parse_mapping_line(fields: list[str]) -> JobInfo:
    """A mapping file's first line, "JOBID [USER] [account=A] [partition=P]": the key=value fields are
    optional and follow the user; keys this version does not know are skipped, for newer prologs."""
    user = fields[1] if len(fields) > 1 and "=" not in fields[1] else None
    extra = dict(field.split("=", 1) for field in fields[1:] if "=" in field)
    return JobInfo(fields[0], user, account=extra.get("account") or None, partition=extra.get("partition") or None)


class _CgroupView:
    """The Slurm job cgroups visible now, read once per cycle, to tell a dead job's file from a live one.

    A job may only be called dead where it would have a cgroup if it were alive. Slurm makes one for
    every job from allocation on only with PrologFlags=Contain (the "extern" step); without it an
    allocation that starts no step has none. So the judge is a tree that holds some job's step_extern:
    proof that Slurm puts jobs there and contains them from the start. No such tree (no cgroups, a
    layout not known here, a tree left from another configuration, no Contain): every file is trusted.
    Array tasks written as 1234_7 are trusted too: their cgroup is named by the task's own job id."""

    def __init__(self, root: Path) -> None:
        self._jobs: set[str] = set()
        self._contained = False
        for tree_glob, job_glob in SLURM_CGROUP_TREES:
            for tree in root.glob(tree_glob):
                for job in tree.glob(job_glob.format("*")):
                    self._jobs.add(job.name.removeprefix("job_"))
                    self._contained = self._contained or (job / "step_extern").is_dir()

    def may_be_alive(self, job_id: str) -> bool:
        return not self._contained or "_" in job_id or job_id in self._jobs


def configured_mapping_dir(slurm_conf: str | os.PathLike[str] | None = None) -> Path:
    """The prolog's map_dir: from gpuscope.conf beside slurm.conf ($SLURM_CONF, where Slurm's own
    commands look, else /etc/slurm/slurm.conf), else /etc/slurm/gpuscope.conf, as the prolog reads it;
    /run/gpuscope/slurm when neither sets it."""
    conf = Path(slurm_conf or os.environ.get("SLURM_CONF") or DEFAULT_SLURM_CONF)
    for path in (conf.parent / "gpuscope.conf", DEFAULT_SLURM_CONF.parent / "gpuscope.conf"):
        if path.is_file():
            value = _setting(path, "map_dir")
            return Path(value) if value else DEFAULT_MAPPING_DIR
    return DEFAULT_MAPPING_DIR


def _setting(path: Path, key: str) -> str | None:
    """The last `key=value` of a gpuscope.conf ('#' starts a comment line), as the scripts read it."""
    value = None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        log.warning("cannot read %s: %s", path, exc.strerror)
        return None
    for line in lines:
        name, sep, rest = line.partition("=")
        if sep and name.strip() == key:
            value = rest.strip()
    return value


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
