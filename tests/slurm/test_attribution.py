"""The shipped prolog and epilog under a real slurmd, installed as deploy/slurm/README.md says.

The exporter's own attribution (SlurmJobs over the files) must name the GPUs Slurm gave each job, for
gres.conf listing the devices in minor order, out of order, and only some of them; for batch jobs,
srun steps and idle salloc allocations; as root and as another user. Where the host allows real
cgroups, ConstrainDevices=yes shows which devices a job may open: the ground truth for "gave".
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from tests.slurm.cluster import SlurmCluster, cgroup_v1_unusable
from tests.slurm.conftest import ClusterFactory
from tests.slurm.fake_nvidia_smi import uuid_of
from tests.slurm.gpuscope_node import attribution, deploy, map_dir, mapping_files, wait_for_files

PROBE = Path(__file__).with_name("probe_devices.py")
LAYOUTS = {  # the minors gres.conf lists, in its order: Slurm's GPU index i is layout[i]
    "in-minor-order": [0, 1, 2, 3, 4, 5, 6, 7],
    "out-of-order": [6, 4, 7, 5, 2, 0, 3, 1],
    "subset": [4, 5, 6, 7],
}


@pytest.fixture(scope="module")
def cluster(module_slurm_cluster_factory: ClusterFactory) -> SlurmCluster:
    cluster = module_slurm_cluster_factory(gpus=[], start=False, cgroups=cgroup_v1_unusable() is None)
    deploy(cluster)
    return cluster  # each test starts it with its own gres.conf (reconfigure)


def restart_with(cluster: SlurmCluster, layout: list[int]) -> None:
    cluster.reconfigure(gpus=layout)
    shutil.rmtree(map_dir(cluster), ignore_errors=True)


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_each_job_is_attributed_the_gpus_slurm_gave_it(cluster: SlurmCluster, layout: list[int]) -> None:
    restart_with(cluster, layout)
    probe_out = cluster.root / "batch.devices"
    probe_out.unlink(missing_ok=True)
    batch = cluster.sbatch(
        "--gres=gpu:2", "-A", "physics", "--output=/dev/null",
        "--wrap", f"{sys.executable} {PROBE} {cluster.dev_dir} > {probe_out}; sleep 300",
    )  # fmt: skip
    cluster.background("srun", "--gres=gpu:1", "-J", "step", "--chdir=/tmp", "sleep", "300", user="nobody")
    cluster.background("salloc", "--no-shell", "--gres=gpu:1", "-J", "idle")  # no step, ever: see PrologFlags
    step, idle = cluster.wait_for_job_named("step"), cluster.wait_for_job_named("idle")
    for job in (batch, step, idle):
        cluster.wait_for_job(job, "RUNNING")
    minors = {job: [layout[i] for i in cluster.job_gpu_indices(job)] for job in (batch, step, idle)}
    wait_for_files(cluster, sum(map(len, minors.values())))

    found = attribution(cluster)
    assert {uuid: job.job_id for uuid, job in found.items()} == {
        uuid_of(minor): job for job, held in minors.items() for minor in held
    }, f"gres.conf {layout}, files {mapping_files(cluster)}"
    details = {(job.job_id, job.user, job.account, job.partition) for job in found.values()}
    expected = {(batch, "root", "physics", "debug"), (step, "nobody", None, "debug"), (idle, "root", None, "debug")}
    assert details == expected
    # without accounting a job has an account only if given one: slurmctld knows no more than the prolog
    assert cluster.job_info(idle)["Account"] == "(null)"
    if cluster.cgroups:  # of the devices in gres.conf, Slurm's device cgroup lets the job open exactly these
        cluster.wait_for(lambda: probe_out.exists() and probe_out.read_text().strip(), "the batch job's probe")
        opened = {int(minor) for minor in probe_out.read_text().split()}
        assert opened & set(layout) == set(minors[batch])


def test_epilog_removes_only_its_own_jobs_files(cluster: SlurmCluster) -> None:
    restart_with(cluster, [0, 1, 2, 3])
    batch = cluster.sbatch("--gres=gpu:1", "--output=/dev/null", "--wrap", "sleep 300")
    cluster.background("salloc", "--no-shell", "--gres=gpu:2", "-J", "idle")
    idle = cluster.wait_for_job_named("idle")
    wait_for_files(cluster, 3)
    (map_dir(cluster) / "GPU-of-another-node").write_text("777 erin\n")  # a job the epilogs do not own

    cluster.scancel(idle)
    cluster.wait_for(lambda: idle not in cluster.jobs(), f"job {idle}'s epilog")
    owners = {line.split()[0] for line in mapping_files(cluster).values()}
    assert owners == {batch, "777"}, mapping_files(cluster)

    cluster.scancel(batch)
    cluster.wait_until_no_jobs()
    assert mapping_files(cluster) == {"GPU-of-another-node": "777 erin"}


def test_prolog_writes_nothing_rather_than_guess(cluster: SlurmCluster) -> None:
    """The driver knows no GPU at the minors Slurm gave (nvidia-smi lists 0-7): no file, and the job
    runs on a node that is not drained (a failing prolog would drain it)."""
    restart_with(cluster, [8, 9])
    job = cluster.sbatch("--gres=gpu:1", "--output=/dev/null", "--wrap", "sleep 300")
    cluster.wait_for_job(job, "RUNNING")
    probe = cluster.srun("--jobid", job, "--overlap", "true")  # a step after the prolog has finished
    assert probe.returncode == 0
    assert mapping_files(cluster) == {}
    assert "DRAIN" not in cluster.node_info()["State"]
