"""Slurm job attribution: the prolog's mapping files (real scripts), stale files, the process fallback."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpuscope.exporter.jobs.slurm import DEFAULT_MAPPING_DIR, SlurmJobs, configured_mapping_dir
from gpuscope.exporter.snapshot import GpuIdentity, JobInfo
from tests.conftest import require_tool

DEPLOY = Path(__file__).resolve().parent.parent.parent / "deploy" / "slurm"
GPUS = tuple(GpuIdentity(i, f"GPU-{i:04d}", "H100", f"0000:{i:02X}:00.0") for i in range(4))


def test_mapping_files_by_uuid_or_index(tmp_path: Path) -> None:
    (tmp_path / "GPU-0000").write_text("1234 alice\n")
    (tmp_path / "2").write_text("99_7\n")  # an array task, no user: dcgm-exporter's style
    jobs = SlurmJobs(tmp_path, cgroup_root=tmp_path / "no-cgroups")
    assert jobs.assign(GPUS, 0.0) == {0: JobInfo("1234", "alice"), 2: JobInfo("99_7", None)}


def test_malformed_file_is_ignored_and_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "GPU-0001").write_text("not-a-job alice\n")
    jobs = SlurmJobs(tmp_path, cgroup_root=tmp_path / "no-cgroups")
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert jobs.assign(GPUS, 0.0) == {}
    assert sum("JOBID [USER]" in m for m in caplog.messages) == 1


def test_mapping_line_with_account_and_partition(tmp_path: Path) -> None:
    (tmp_path / "GPU-0000").write_text("1234 alice account=physics partition=gpu\n")
    (tmp_path / "GPU-0001").write_text("1235 bob partition=debug\n")  # no account: none given, no accounting
    (tmp_path / "GPU-0002").write_text("1236 carol\n")  # an older prolog's file
    (tmp_path / "GPU-0003").write_text("1237 account=chem future=field\n")  # no user; a key not known yet
    jobs = SlurmJobs(tmp_path, cgroup_root=tmp_path / "no-cgroups")
    assert jobs.assign(GPUS, 0.0) == {
        0: JobInfo("1234", "alice", account="physics", partition="gpu"),
        1: JobInfo("1235", "bob", partition="debug"),
        2: JobInfo("1236", "carol"),
        3: JobInfo("1237", None, account="chem"),
    }


# Where Slurm puts job cgroups (Slurm's cgroup docs; v1 as Slurm 22.05 made them under a real slurmd).
CGROUP_LAYOUTS = {
    "v2": "system.slice/slurmstepd.scope/job_{}",
    "v2-multiple-slurmd": "system.slice/node7_slurmstepd.scope/job_{}",
    "v1-freezer-22.05": "freezer/slurm_node7/uid_1000/job_{}",
    "v1-freezer": "freezer/slurm/uid_1000/job_{}",
    "v1-cpuset-memory": "cpuset/slurm_node7/uid_0/job_{}",
}
OLD = time.time() - 3600  # a file written an hour ago: past the grace given to a new one


def with_mapping(tmp_path: Path, jobs: dict[str, str]) -> Path:
    mapping = tmp_path / "map"
    mapping.mkdir()
    for gpu, job in jobs.items():
        (mapping / gpu).write_text(f"{job} bob\n")
        os.utime(mapping / gpu, (OLD, OLD))
    return mapping


@pytest.mark.parametrize("layout", CGROUP_LAYOUTS.values(), ids=CGROUP_LAYOUTS.keys())
def test_stale_file_of_a_finished_job_is_ignored(tmp_path: Path, layout: str) -> None:
    cgroups = tmp_path / "cgroup"
    (cgroups / layout.format(500) / "step_extern").mkdir(parents=True)  # PrologFlags=Contain: every job has one
    (cgroups / layout.format(600) / "step_0").mkdir(parents=True)  # a job without Contain's step
    mapping = with_mapping(tmp_path, {"GPU-0000": "500", "GPU-0001": "400", "GPU-0002": "600", "GPU-0003": "401_3"})
    jobs = SlurmJobs(mapping, cgroup_root=cgroups)  # 400: its epilog never ran, and its cgroup is gone
    assert {i: j.job_id for i, j in jobs.assign(GPUS, 0.0).items()} == {0: "500", 2: "600", 3: "401_3"}


@pytest.mark.parametrize(
    "tree",
    [
        "elsewhere/job_500/step_extern",  # a layout this rule does not know
        "system.slice/slurmstepd.scope/job_500/step_0",  # Slurm's tree, but no Contain: idle allocations have none
        "freezer/slurm_node7/uid_0",  # a tree with no job in it (left from another configuration)
    ],
)
def test_where_cgroups_cannot_tell_every_file_is_trusted(tmp_path: Path, tree: str) -> None:
    cgroups = tmp_path / "cgroup"
    (cgroups / tree).mkdir(parents=True)
    mapping = with_mapping(tmp_path, {"GPU-0000": "500", "GPU-0001": "400"})
    jobs = SlurmJobs(mapping, cgroup_root=cgroups)
    assert {i: j.job_id for i, j in jobs.assign(GPUS, 0.0).items()} == {0: "500", 1: "400"}


def test_a_new_file_is_trusted_before_its_jobs_cgroup_exists(tmp_path: Path) -> None:
    cgroups = tmp_path / "cgroup"
    (cgroups / "system.slice/slurmstepd.scope/job_500/step_extern").mkdir(parents=True)
    mapping = with_mapping(tmp_path, {"GPU-0000": "500"})
    (mapping / "GPU-0001").write_text("501 bob\n")  # the prolog runs before Slurm makes the job's cgroup
    now = time.time()
    assert len(SlurmJobs(mapping, cgroup_root=cgroups, clock=lambda: now).assign(GPUS, now)) == 2
    later = SlurmJobs(mapping, cgroup_root=cgroups, clock=lambda: now + 120)
    assert {i: j.job_id for i, j in later.assign(GPUS, now).items()} == {0: "500"}


def test_mapping_dir_from_gpuscope_conf_beside_slurm_conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gpuscope.conf").write_text("# the prolog's settings\nmap_dir = /srv/gpu-jobs \npath=/opt/x\n")
    assert configured_mapping_dir(tmp_path / "slurm.conf") == Path("/srv/gpu-jobs")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))  # as Slurm's commands find slurm.conf
    assert configured_mapping_dir() == Path("/srv/gpu-jobs")
    (tmp_path / "gpuscope.conf").write_text("map_dir=\n")
    assert configured_mapping_dir() == DEFAULT_MAPPING_DIR


def fake_process(proc: Path, pid: int, cgroup: str, environ: bytes = b"") -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(cgroup)
    (proc / str(pid) / "environ").write_bytes(environ)


def test_process_fallback_reads_cgroups_and_environment(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    fake_process(proc, 101, "0::/system.slice/slurmstepd.scope/job_777/step_0/user/task_0\n")
    fake_process(proc, 102, "12:memory:/slurm/uid_1000/job_888/step_batch\n")
    fake_process(proc, 103, "0::/user.slice\n", b"HOME=/root\0SLURM_JOB_ID=999\0")
    fake_process(proc, 104, "0::/user.slice\n", b"HOME=/root\0")
    pids = {0: [101], 1: [102], 2: [103], 3: [104, 4242]}  # 4242: gone before we looked
    jobs = SlurmJobs(tmp_path / "no-map", pids_of=lambda i: pids[i], proc_root=proc, cgroup_root=tmp_path / "x")
    found = jobs.assign(GPUS, 0.0)
    assert {i: j.job_id for i, j in found.items()} == {0: "777", 1: "888", 2: "999"}
    assert found[0].user is not None  # the owner of /proc/PID


def test_mapping_wins_over_processes(tmp_path: Path) -> None:
    proc, mapping = tmp_path / "proc", tmp_path / "map"
    mapping.mkdir()
    (mapping / "GPU-0000").write_text("1 alice\n")
    fake_process(proc, 5, "0::/system.slice/slurmstepd.scope/job_2/step_0\n")
    jobs = SlurmJobs(mapping, pids_of=lambda i: [5], proc_root=proc, cgroup_root=tmp_path / "x")
    assert jobs.assign(GPUS[:2], 0.0) == {0: JobInfo("1", "alice"), 1: JobInfo("2", jobs.job_of_pid(5).user)}  # type: ignore[union-attr]


# The scripts themselves: tests/slurm/test_prolog_script.py, and under a real slurmd tests/slurm/.


def test_shellcheck_passes_on_the_slurm_scripts() -> None:
    shellcheck = require_tool("shellcheck")
    scripts = sorted(str(p) for p in DEPLOY.glob("*.sh"))
    result = subprocess.run([shellcheck, *scripts], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout
    assert os.access(DEPLOY / "prolog.sh", os.X_OK)
