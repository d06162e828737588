"""Slurm job attribution: the prolog's mapping files (real scripts), stale files, the process fallback."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest

from gpuscope.exporter.jobs.slurm import SlurmJobs
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


def test_stale_file_of_a_finished_job_is_ignored(tmp_path: Path) -> None:
    mapping, cgroups = tmp_path / "map", tmp_path / "cgroup"
    mapping.mkdir()
    (cgroups / "system.slice" / "slurmstepd.scope" / "job_500").mkdir(parents=True)
    (mapping / "GPU-0000").write_text("500 bob\n")
    (mapping / "GPU-0001").write_text("400 carol\n")  # its epilog never ran: no cgroup any more
    jobs = SlurmJobs(mapping, cgroup_root=cgroups)
    assert jobs.assign(GPUS, 0.0) == {0: JobInfo("500", "bob")}


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


def run_script(name: str, env: dict[str, str], path_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(DEPLOY / name)],
        env={"PATH": f"{path_dir}:/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_prolog_and_epilog_scripts(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"  # the driver's tool, answering as on a node whose minor numbers are shuffled
    smi.write_text("#!/bin/sh\nprintf '0, GPU-0001\\n1, GPU-0000\\n2, GPU-0002\\n3, GPU-0003\\n'\n")
    smi.chmod(0o755)
    mapping = tmp_path / "map"
    env = {
        "GPUSCOPE_SLURM_MAP_DIR": str(mapping),
        "SLURM_JOB_ID": "4321",
        "SLURM_JOB_USER": "dana",
        "SLURM_JOB_GPUS": "0,1",
    }
    result = run_script("prolog.sh", env, bin_dir)
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in mapping.iterdir()) == ["GPU-0000", "GPU-0001"]
    jobs = SlurmJobs(mapping, cgroup_root=tmp_path / "no-cgroups")
    assert jobs.assign(GPUS, 0.0) == {0: JobInfo("4321", "dana"), 1: JobInfo("4321", "dana")}

    (mapping / "GPU-0003").write_text("5555 erin\n")  # another job's GPU
    assert run_script("epilog.sh", {**env, "SLURM_JOB_ID": "4321"}, bin_dir).returncode == 0
    assert [p.name for p in mapping.iterdir()] == ["GPU-0003"], "only this job's files go"


def test_prolog_refuses_to_run_outside_slurm(tmp_path: Path) -> None:
    result = run_script("prolog.sh", {"GPUSCOPE_SLURM_MAP_DIR": str(tmp_path)}, tmp_path)
    assert result.returncode != 0 and "SLURM_JOB_ID is not set" in result.stderr


def test_shellcheck_passes_on_the_slurm_scripts() -> None:
    shellcheck = require_tool("shellcheck")
    scripts = sorted(str(p) for p in DEPLOY.glob("*.sh"))
    result = subprocess.run([shellcheck, *scripts], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stdout
    assert os.access(DEPLOY / "prolog.sh", os.X_OK)
