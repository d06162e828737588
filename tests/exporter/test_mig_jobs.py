"""Job attribution per MIG device: Slurm's mapping files named by MIG UUID, the processes NVML lists on
each MIG device, what /metrics shows (gpuscope_mig_job_info), and whole GPUs attributed as before."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.exporter.exposition import ExporterIdentity, Exposition
from gpuscope.exporter.jobs.select import open_jobs
from gpuscope.exporter.jobs.slurm import PROCESS_EVERY, SlurmJobs
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.snapshot import GpuIdentity, JobInfo
from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.testing.fake_nvml import FakeGpu, h100_node, make_fake_pynvml, mig_layout

IDENTITY = ExporterIdentity("c", "r", "node-7", "nvml", "test")


def fake_process(proc: Path, pid: int, job: str) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/slurmstepd.scope/job_{job}/step_0/user/task_0\n")
    (proc / str(pid) / "environ").write_bytes(b"")


def mig_node() -> list[FakeGpu]:
    """GPU 0 whole, GPU 1 in MIG mode with three MIG devices, as on a node where Slurm shares GPU 1."""
    gpus = h100_node(2)
    mig_layout(gpus[1], ["3g.40gb", "1g.10gb", "1g.10gb"])
    return gpus


def test_mapping_files_named_by_mig_uuid_give_each_mig_device_its_job(tmp_path: Path) -> None:
    gpus = mig_node()
    whole, migs = gpus[0], gpus[1].mig_devices
    (tmp_path / whole.uuid).write_text("100 alice\n")
    (tmp_path / migs[0].uuid).write_text("200 bob\n")
    (tmp_path / migs[2].uuid).write_text("300_4\n")
    jobs = SlurmJobs(tmp_path, cgroup_root=tmp_path / "no-cgroups")
    identities = (GpuIdentity(0, whole.uuid, "H100", "a"), GpuIdentity(1, gpus[1].uuid, "H100", "b"))
    assert jobs.assign(identities, 0.0) == {0: JobInfo("100", "alice")}, "a MIG device's file names no GPU"
    assert jobs.assign_mig({1: tuple(m.uuid for m in migs)}, 0.0) == {
        migs[0].uuid: JobInfo("200", "bob"),
        migs[2].uuid: JobInfo("300_4", None),
    }


def test_a_stale_mig_mapping_is_ignored_as_a_gpus_is(tmp_path: Path) -> None:
    mapping, cgroups = tmp_path / "map", tmp_path / "cgroup"
    mapping.mkdir()
    # PrologFlags=Contain: every job has a cgroup with a step_extern, so a missing one means a dead job
    (cgroups / "system.slice" / "slurmstepd.scope" / "job_500" / "step_extern").mkdir(parents=True)
    (mapping / "MIG-aaaa").write_text("500 bob\n")
    (mapping / "MIG-bbbb").write_text("400 carol\n")  # its epilog never ran: no cgroup any more
    jobs = SlurmJobs(mapping, cgroup_root=cgroups, clock=lambda: time.time() + 120)  # past a new file's grace
    assert jobs.assign_mig({3: ("MIG-aaaa", "MIG-bbbb")}, 0.0) == {"MIG-aaaa": JobInfo("500", "bob")}


def test_only_names_that_can_be_files_are_looked_up(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "0").write_text("7 dana\n")
    jobs = SlurmJobs(tmp_path, cgroup_root=tmp_path / "no-cgroups")
    with caplog.at_level(logging.WARNING):
        # NVML before R470 named MIG devices "MIG-GPU-<uuid>/<gi>/<ci>"; a GPU not opened has no UUID yet
        assert jobs.assign_mig({0: ("MIG-GPU-0000/1/0", "..", "")}, 0.0) == {}
        assert jobs.assign((GpuIdentity(0, "", "", ""),), 0.0) == {0: JobInfo("7", "dana")}
    assert caplog.messages == [], "no attempt to read the mapping directory itself"


def scanned_node(tmp_path: Path) -> tuple[list[FakeGpu], NvmlSource, SlurmJobs]:
    """The fake NVML node with jobs running on MIG devices 0 and 1 of GPU 1 and on GPU 0, and Slurm
    attribution from its processes (no mapping files)."""
    gpus = mig_node()
    proc = tmp_path / "proc"
    gpus[0].processes = [10]
    fake_process(proc, 10, "1000")
    for pid, job, mig in ((20, "2000", gpus[1].mig_devices[0]), (30, "3000", gpus[1].mig_devices[1])):
        mig.processes = [4242, pid]  # 4242: ended before it was looked at
        fake_process(proc, pid, job)
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    jobs = SlurmJobs(
        tmp_path / "no-map",
        pids_of=source.running_pids,
        proc_root=proc,
        cgroup_root=tmp_path / "no-cgroups",
        mig_pids_of=source.mig_running_pids,
    )
    return gpus, source, jobs


def test_processes_on_each_mig_device_name_its_job_and_metrics_show_it(tmp_path: Path) -> None:
    gpus, source, jobs = scanned_node(tmp_path)
    sampler = Sampler(source, interval=1.0, jobs=jobs)
    snapshot = sampler.sample_once(1.0)
    migs = gpus[1].mig_devices
    assert snapshot.mig_jobs is not None
    assert {uuid: job.job_id for uuid, job in snapshot.mig_jobs.items()} == {migs[0].uuid: "2000", migs[1].uuid: "3000"}
    body, _ = Exposition(IDENTITY, lambda: snapshot).render(None)
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    samples = families["gpuscope_mig_job_info"].samples
    shown = {(s.labels["gpu_instance_id"], s.labels["mig_uuid"], s.labels["job_id"]) for s in samples}
    assert shown == {("1", migs[0].uuid, "2000"), ("2", migs[1].uuid, "3000")}
    assert {s.labels["gpu"]: s.labels["job_id"] for s in families["gpuscope_gpu_job_info"].samples} == {
        "0": "1000",
        "1": "2000",
    }, "whole GPUs as before: a MIG GPU takes the first job among its devices' processes"
    source.close()


def test_whole_gpu_attribution_is_what_it_was_without_mig_attribution(tmp_path: Path) -> None:
    _, source, jobs = scanned_node(tmp_path)
    before = SlurmJobs(tmp_path / "no-map", pids_of=source.running_pids, proc_root=tmp_path / "proc")
    gpus, _ = source.read(0.0)
    identities = tuple(r.gpu for r in gpus)
    assert jobs.assign(identities, 0.0) == before.assign(identities, 0.0)
    assert Sampler(source, 1.0, jobs=before).sample_once(1.0).mig_jobs == {}, "mapping files can still name MIG UUIDs"
    source.close()


def test_the_mapping_wins_and_a_destroyed_mig_device_loses_its_job(tmp_path: Path) -> None:
    gpus, source, jobs = scanned_node(tmp_path)
    migs = gpus[1].mig_devices
    mapping = tmp_path / "no-map"
    mapping.mkdir()
    (mapping / migs[1].uuid).write_text("3111 erin\n")
    sampler = Sampler(source, interval=1.0, jobs=jobs)
    first = sampler.sample_once(0.0).mig_jobs
    assert first is not None and first[migs[1].uuid] == JobInfo("3111", "erin") and first[migs[0].uuid].job_id == "2000"
    del migs[0]  # the instance is destroyed; the exporter finds the MIG devices again on the slow cadence
    later = [sampler.sample_once(float(t)).mig_jobs for t in range(1, max(SLOW_EVERY, PROCESS_EVERY) + 1)]
    assert later[-1] == {migs[0].uuid: JobInfo("3111", "erin")}
    source.close()


def test_open_jobs_passes_the_mig_processes_of_an_nvml_node(tmp_path: Path) -> None:
    _, source, _ = scanned_node(tmp_path)
    jobs = open_jobs("slurm", source, tmp_path / "no-map", cgroup_root=tmp_path / "no-cgroups")
    assert isinstance(jobs, SlurmJobs)
    assert jobs._mig_pids_of == source.mig_running_pids and jobs._pids_of == source.running_pids
    source.close()


class BrokenMigJobs:
    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        return {0: JobInfo("1")}

    def assign_mig(self, migs: object, now: float) -> dict[str, JobInfo]:
        raise RuntimeError("a bug")


class WholeGpuJobs:
    def assign(self, gpus: tuple[GpuIdentity, ...], now: float) -> dict[int, JobInfo]:
        return {0: JobInfo("1")}


def test_mig_attribution_failing_or_absent_leaves_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    source = NvmlSource(make_fake_pynvml(mig_node()), xid_events=False)
    with caplog.at_level(logging.ERROR):
        snapshot = Sampler(source, 1.0, jobs=BrokenMigJobs()).sample_once(0.0)
    assert snapshot.jobs == {0: JobInfo("1")} and snapshot.mig_jobs is None
    assert any("MIG job attribution failed" in m for m in caplog.messages)
    snapshot = Sampler(source, 1.0, jobs=WholeGpuJobs()).sample_once(1.0)
    assert snapshot.jobs == {0: JobInfo("1")} and snapshot.mig_jobs is None, "cannot tell MIG devices apart"
    source.close()
