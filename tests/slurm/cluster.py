"""A real one-node Slurm for tests: slurmctld and slurmd on loopback, everything in one directory.

    cluster = SlurmCluster(directory, gpus=[0, 1, 2, 3])   # or the fixtures in tests/slurm/conftest.py
    cluster.start()
    job = cluster.sbatch("--gres=gpu:1", "--wrap", "sleep 30")
    cluster.wait_for_job(job, "RUNNING")
    cluster.scontrol("update", f"nodename={cluster.node}", "state=drain", "reason=disk full")
    assert "DRAIN" in cluster.node_info()["State"]
    cluster.stop()

What it is
- Debian's Slurm 22.05 (slurmctld, slurmd, slurm-client) with AuthType=auth/none and CredType=cred/none:
  no munged. It runs as root: slurmd runs prologs as root, and the fake GPUs are device files (mknod).
- One node, `cluster.node`, with a name unique to the cluster (two clusters on one host never share a
  cgroup directory), NodeAddr=127.0.0.1, free ports and NoCtldInAddrAny,NoInAddrAny: loopback only. Job
  ids start at a random FirstJobId, so they differ between clusters too.
- Fake GPUs: DIR/dev/nvidiaN character devices (major 195, minor N, as the NVIDIA driver makes them),
  listed in gres.conf (AutoDetect=off, one File= line each) in the order given: `gpus=[6, 4]` makes
  Slurm's GPU 0 /dev/nvidia6. slurm.conf says Gres=gpu:<how many>.
- `settings`: slurm.conf keys to add or replace (Prolog=, Epilog=, PrologFlags=, ...). `cgroups=True`:
  proctrack/cgroup and task/cgroup with ConstrainDevices=yes (cgroup v1: see cgroup_v1_unusable()).
- Files: DIR/slurm.conf, gres.conf, cgroup.conf, log/ (the daemons' logs), state/, spool/. `cluster.env`
  holds SLURM_CONF=DIR/slurm.conf; every command below runs with it, in DIR.

Use
- run(command, *args, user=None): any Slurm command ("scontrol", "sinfo", ...), as root or as `user`.
- srun(*args), sbatch(*args) -> job id, salloc(*args) -> job id (--no-shell), background(command, *args):
  a command left running (an srun, or an salloc not waited for).
- scontrol(*args), scancel(*jobs), node_info() (`scontrol show node -o`, as a dict), job_info(job),
  job_gpu_indices(job): Slurm's GPU indices (positions in gres.conf) of a running job.
- wait_for_node(*states), wait_for_job(job, *states), wait_for_job_named(name), wait_until_no_jobs(),
  wait_for(check, what): bounded polls.
- reconfigure(gpus=..., settings=...): cancel the jobs, rewrite the files, restart both daemons afresh
  (settings= replaces the keys given before; cluster.settings can be edited before start() too).
- stop(): cancel the jobs, SIGTERM the daemons by pid, kill what they left behind (slurmstepd and job
  processes, found by this cluster's SLURM_CONF in their environment), remove this node's cgroups.
Every wait is bounded; a timeout says what it waited for and ends with the daemons' last log lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tests.commands import stop_process

T = TypeVar("T")

BINARIES = ("slurmctld", "slurmd", "slurmstepd", "srun", "sbatch", "salloc", "scontrol", "scancel", "squeue")
CGROUP_ROOT = Path("/sys/fs/cgroup")
NVIDIA_MAJOR = 195
# "Key=value Key=value with spaces Key=..." as `scontrol show ... -o` prints it (keys like CPUs/Task too)
FIELD = re.compile(r"([A-Za-z][\w/:]*)=(.*?)(?=\s+[A-Za-z][\w/:]*=|\s*$)")


class SlurmCommandError(RuntimeError):
    pass


class SlurmCluster:
    def __init__(
        self,
        root: Path,
        gpus: Sequence[int] = (0, 1, 2, 3),
        *,
        settings: Mapping[str, str] | None = None,
        cgroups: bool = False,
        cpus: int = 16,
        partition: str = "debug",
    ) -> None:
        self.root = root
        self.node = "gs" + secrets.token_hex(4)
        self.partition = partition
        self.cpus = cpus
        self.gpus = list(gpus)
        self.settings = dict(settings or {})
        self.cgroups = cgroups
        self.conf = root / "slurm.conf"
        self.dev_dir = root / "dev"
        self.log_dir = root / "log"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")} | {"SLURM_CONF": str(self.conf)}
        self._daemons: list[subprocess.Popen[Any]] = []
        self._background: list[subprocess.Popen[Any]] = []

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> None:
        for name in ("dev", "log", "state", "spool"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        self._write_files()
        self._daemons = [
            self._daemon("slurmctld", "-D", "-i", "-f", str(self.conf)),
            self._daemon("slurmd", "-D", "-N", self.node, "-f", str(self.conf)),
        ]
        self.wait_for_node("IDLE", timeout=timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """Whatever state the cluster is in; every wait in it is bounded by `timeout`."""
        try:
            if self._daemons and all(d.poll() is None for d in self._daemons):
                self._cancel_all(timeout)
        finally:
            for proc in [*self._background, *self._daemons]:
                stop_process(proc, timeout)
            self._background, self._daemons = [], []
            self._kill_leftovers()
            self._remove_cgroups()

    def reconfigure(
        self, gpus: Sequence[int] | None = None, settings: Mapping[str, str] | None = None, timeout: float = 30.0
    ) -> None:
        """New GPUs (in gres.conf order) or new added slurm.conf keys (replacing the old ones): a fresh
        start, with a new state and job ids."""
        self.stop()
        if gpus is not None:
            self.gpus = list(gpus)
        if settings is not None:
            self.settings = dict(settings)
        for name in ("state", "spool"):
            shutil.rmtree(self.root / name, ignore_errors=True)
        self.start(timeout)

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- commands --------------------------------------------------------------------------------------

    def run(
        self, command: str, *args: str, user: str | None = None, timeout: float = 30.0, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        argv = [command, *args] if user is None else ["runuser", "-u", user, "--", command, *args]
        result = subprocess.run(
            argv, env=self.env, cwd=self.root, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise SlurmCommandError(f"{' '.join(argv)} exited {result.returncode}: {result.stderr.strip()}")
        return result

    def scontrol(self, *args: str, **kw: Any) -> str:
        return self.run("scontrol", *args, **kw).stdout

    def srun(self, *args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.run("srun", *args, **kw)

    def background(self, command: str, *args: str, user: str | None = None) -> subprocess.Popen[str]:
        """A command left running (srun, or salloc, which waits for the prolog to end); stop() ends it.
        Its job: wait_for_job_named(NAME), with `-J NAME` among the args. Its
        output goes to log/<command>-<n>.out."""
        argv = [command, *args] if user is None else ["runuser", "-u", user, "--", command, *args]
        with (self.log_dir / f"{command}-{len(self._background)}.out").open("w") as out:
            proc = subprocess.Popen(argv, env=self.env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT)
        self._background.append(proc)
        return proc

    def sbatch(self, *args: str, **kw: Any) -> str:
        return self.run("sbatch", "--parsable", *args, **kw).stdout.strip().split(";")[0]

    def salloc(self, *args: str, **kw: Any) -> str:
        """An allocation with no shell and no step (it lasts until scancel); returns its job id."""
        result = self.run("salloc", "--no-shell", *args, **kw)
        match = re.search(r"Granted job allocation (\d+)", result.stderr)
        if match is None:
            raise SlurmCommandError(f"salloc said: {result.stderr.strip()}")
        return match.group(1)

    def scancel(self, *jobs: str) -> None:
        if jobs:
            self.run("scancel", *jobs)

    def job_named(self, name: str) -> str | None:
        out = self.run("squeue", "-h", "-n", name, "-o", "%i").stdout.split()
        return out[0] if out else None

    def jobs(self) -> list[str]:
        """Jobs slurmctld still holds: pending, running, or completing (epilog not done)."""
        return self.run("squeue", "-h", "-o", "%i").stdout.split()

    # -- state -----------------------------------------------------------------------------------------

    def node_info(self) -> dict[str, str]:
        return parse_fields(self.scontrol("show", "node", "-o", self.node))

    def job_info(self, job: str) -> dict[str, str]:
        return parse_fields(self.scontrol("show", "job", "-o", job))

    def job_gpu_indices(self, job: str) -> list[int]:
        """Slurm's indices of the job's GPUs on this node (`GRES=gpu:2(IDX:0-1)`), while it runs."""
        match = re.search(r"GRES=\S*\(IDX:([\d,-]+)\)", self.scontrol("show", "job", "-d", job))
        if match is None:
            raise SlurmCommandError(f"job {job} shows no GPU indices")
        return expand_ranges(match.group(1))

    def device(self, minor: int) -> Path:
        return self.dev_dir / f"nvidia{minor}"

    # -- waiting ---------------------------------------------------------------------------------------

    def wait_for(self, check: Callable[[], T | None], what: str, timeout: float = 20.0) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}\n{self.log_tail()}")
            time.sleep(0.1)

    def wait_for_node(self, *states: str, timeout: float = 20.0) -> dict[str, str]:
        """Until the node's State (e.g. IDLE, MIXED+DRAIN) is one of `states`."""

        def in_state() -> dict[str, str] | None:
            info = self._node_info_or_none()
            return info if info and info.get("State") in states else None

        return self.wait_for(in_state, f"node {self.node} in state {' or '.join(states)}", timeout)

    def wait_for_job(self, job: str, *states: str, timeout: float = 20.0) -> dict[str, str]:
        """Until the job's JobState (PENDING, RUNNING, COMPLETED, CANCELLED, ...) is one of `states`."""

        def in_state() -> dict[str, str] | None:
            info = self.job_info(job)
            return info if info.get("JobState") in states else None

        return self.wait_for(in_state, f"job {job} in state {' or '.join(states)}", timeout)

    def wait_for_job_named(self, name: str, timeout: float = 20.0) -> str:
        """The id of the job named `name` (-J), once slurmctld has it."""
        return self.wait_for(lambda: self.job_named(name), f"a job named {name}", timeout)

    def wait_until_no_jobs(self, timeout: float = 20.0) -> None:
        """Until no job is pending, running or completing: every epilog has run."""
        self.wait_for(lambda: not self.jobs(), "no jobs left", timeout)

    def log_tail(self, lines: int = 15) -> str:
        tails = []
        for path in sorted(self.log_dir.glob("*.log")):
            text = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"--- {path.name}\n" + "\n".join(text))
        return "\n".join(tails)

    # -- internals -------------------------------------------------------------------------------------

    def _node_info_or_none(self) -> dict[str, str] | None:
        result = self.run("scontrol", "show", "node", "-o", self.node, check=False)
        return parse_fields(result.stdout) if result.returncode == 0 else None

    def _daemon(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with (self.log_dir / f"{name}.out").open("ab") as out:
            # a session of its own: a terminal's Ctrl-C reaches pytest, which then stops the cluster
            return subprocess.Popen(
                [name, *args], env=self.env, cwd=self.root, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _write_files(self) -> None:
        for minor in self.gpus:
            if not self.device(minor).exists():
                os.mknod(self.device(minor), 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))  # S_IFCHR
        gres = ["AutoDetect=off", *(f"Name=gpu File={self.device(minor)}" for minor in self.gpus)]
        (self.root / "gres.conf").write_text("\n".join(gres) + "\n")
        (self.root / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n")
        self.conf.write_text("\n".join(f"{k}={v}" for k, v in self._slurm_settings().items()) + "\n" + self._nodes())

    def _slurm_settings(self) -> dict[str, str]:
        ctld_port, slurmd_port = free_ports(2)
        d = self.root
        settings = {
            "ClusterName": self.node,
            "SlurmctldHost": "localhost(127.0.0.1)",
            "SlurmctldPort": str(ctld_port),
            "SlurmdPort": str(slurmd_port),
            "CommunicationParameters": "NoCtldInAddrAny,NoInAddrAny",
            "AuthType": "auth/none",
            "CredType": "cred/none",
            "SlurmUser": "root",
            "SlurmdUser": "root",
            "ProctrackType": "proctrack/cgroup" if self.cgroups else "proctrack/linuxproc",
            "TaskPlugin": "task/cgroup" if self.cgroups else "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none",
            "MpiDefault": "none",
            "SelectType": "select/cons_tres",
            "SelectTypeParameters": "CR_CPU",  # memory untracked: jobs would otherwise each take the node's
            "SlurmdParameters": "config_overrides",  # 16 CPUs on a 2-CPU machine
            "SchedulerParameters": "batch_sched_delay=0",
            "ReturnToService": "2",
            "KillWait": "2",
            "PrologEpilogTimeout": "60",
            "FirstJobId": str(secrets.randbelow(50_000) * 1000 + 1000),
            "GresTypes": "gpu",
            "StateSaveLocation": str(d / "state"),
            "SlurmdSpoolDir": str(d / "spool"),
            "SlurmctldPidFile": str(d / "slurmctld.pid"),
            "SlurmdPidFile": str(d / "slurmd.pid"),
            "SlurmctldLogFile": str(d / "log" / "slurmctld.log"),
            "SlurmdLogFile": str(d / "log" / "slurmd.log"),
        }
        return settings | self.settings

    def _nodes(self) -> str:
        gres = f" Gres=gpu:{len(self.gpus)}" if self.gpus else ""
        return (
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=1000{gres} State=UNKNOWN\n"
            f"PartitionName={self.partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n"
        )

    def _cancel_all(self, timeout: float) -> None:
        try:
            self.scancel(*self.jobs())
            self.wait_until_no_jobs(timeout)
        except (SlurmCommandError, TimeoutError, subprocess.TimeoutExpired):
            pass  # the daemons are stopped next, and what they leave is killed

    def _kill_leftovers(self) -> None:
        """slurmstepd and job processes outlive a stopped slurmd: ours carry our SLURM_CONF."""
        mark = b"SLURM_CONF=" + str(self.conf).encode() + b"\0"
        for pid in _pids_with_environ(mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _remove_cgroups(self) -> None:
        for tree in CGROUP_ROOT.glob(f"*/slurm_{self.node}"):
            _remove_cgroup_tree(tree)


def parse_fields(line: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in FIELD.finditer(line.strip())}


def expand_ranges(text: str) -> list[int]:
    """Slurm's "0-2,5" -> [0, 1, 2, 5]."""
    out: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def slurm_unavailable() -> str | None:
    """Why a real Slurm cannot run here, or None."""
    missing = [name for name in BINARIES if shutil.which(name) is None]
    if missing:
        return f"Slurm is not installed (no {', '.join(missing)}): apt-get install slurmctld slurmd slurm-client"
    if os.geteuid() != 0:
        return "a real Slurm needs root (slurmd runs prologs as root; fake GPUs are made with mknod)"
    return None


def cgroup_v1_unusable(root: Path = CGROUP_ROOT) -> str | None:
    """Why slurmd cannot make real job cgroups here, or None. Slurm 22.05 refuses cgroup v2 in hybrid
    mode (v1 controllers plus a unified tree), so this fixture uses cgroup/v1: freezer and devices."""
    for controller in ("freezer", "devices"):
        hierarchy = root / controller
        if not (hierarchy / "cgroup.procs").exists():
            return f"no cgroup v1 {controller} hierarchy at {hierarchy}"
        probe = hierarchy / f"gpuscope-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            return f"cannot create cgroups in {hierarchy}: {exc.strerror}"
    return None


def _pids_with_environ(mark: bytes) -> Iterable[int]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark in (entry / "environ").read_bytes():
                yield int(entry.name)
        except OSError:
            continue  # gone, or a kernel thread


def _remove_cgroup_tree(tree: Path) -> None:
    """Deepest first, with rmdir: a cgroup's files are the kernel's, and a busy cgroup stays."""
    for path in sorted(tree.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        if path.is_dir():
            with contextlib.suppress(OSError):
                path.rmdir()
    with contextlib.suppress(OSError):
        tree.rmdir()
