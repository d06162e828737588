"""The exporter's stale-file rule against the job cgroups a real slurmd makes (cgroup v1 here: Slurm
22.05 refuses cgroup v2 on a host that also mounts v1 controllers). A file whose job ended without its
epilog is ignored; the files of running jobs, idle allocations included, are not."""

from __future__ import annotations

import time

import pytest

from tests.slurm.cluster import CGROUP_ROOT, cgroup_v1_unusable
from tests.slurm.conftest import ClusterFactory
from tests.slurm.gpuscope_node import attribution, deploy, map_dir, mapping_files, wait_for_files


def test_a_file_outliving_its_job_is_stale_and_running_jobs_are_not(slurm_cluster_factory: ClusterFactory) -> None:
    reason = cgroup_v1_unusable()
    if reason:
        pytest.skip(f"no real job cgroups on this host: {reason} (tests/exporter/test_slurm_jobs.py has the layouts)")
    cluster = slurm_cluster_factory(gpus=[0, 1, 2, 3], start=False, cgroups=True)
    deploy(cluster)  # PrologFlags=Alloc,Contain, as the README says: every job has a cgroup from allocation
    cluster.start()
    running = cluster.sbatch("--gres=gpu:1", "--output=/dev/null", "--wrap", "sleep 300")
    for name in ("idle", "ended"):
        cluster.background("salloc", "--no-shell", "--gres=gpu:1", "-J", name)
    idle, ended = cluster.wait_for_job_named("idle"), cluster.wait_for_job_named("ended")
    files = wait_for_files(cluster, 3)
    tree = CGROUP_ROOT / "freezer" / f"slurm_{cluster.node}" / "uid_0"
    # slurmd makes a job's extern step after its prolog has written the file: under load, seconds after.
    extern_steps = [tree / f"job_{job}" / "step_extern" for job in (running, idle, ended)]
    cluster.wait_for(lambda: all(step.is_dir() for step in extern_steps), "the jobs' extern step cgroups")

    left_behind = {name: line for name, line in files.items() if line.split()[0] == ended}
    cluster.scancel(ended)
    cluster.wait_for(lambda: ended not in cluster.jobs(), f"job {ended} to end")
    assert not (tree / f"job_{ended}").exists()
    # The epilog runs after the job leaves the queue: let it finish, or it removes the files put back below.
    cluster.wait_for(lambda: not set(left_behind) & set(mapping_files(cluster)), f"job {ended}'s epilog")
    for name, line in left_behind.items():  # as if its epilog had never run
        (map_dir(cluster) / name).write_text(line + "\n")
    assert len(mapping_files(cluster)) == 3

    def two_minutes_on() -> float:  # past the grace given to files as young as a prolog's
        return time.time() + 120

    owners = {job.job_id for job in attribution(cluster, clock=two_minutes_on).values()}
    assert owners == {running, idle}
    # now: the rewritten file is as young as a prolog's, and trusted while its job's cgroup may be on its way
    assert {job.job_id for job in attribution(cluster).values()} == {running, idle, ended}
