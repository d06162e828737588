"""MIG devices from the NVML backend to the collector's decoders: each device's identity and slices, its
GPU instance's readings and its job travel in both encodings; a GPU whose instances carry the jobs has
none of its own; a MIG GPU's SM and tensor activity is its instances', weighted by their slices."""

from __future__ import annotations

import gzip
import time
import uuid

import numpy as np
import pytest

from gpuscope.collector.ingest import binary_v2, json_v1
from gpuscope.collector.store.batch import Batch, MigInfo
from gpuscope.exporter.snapshot import GpuReading, JobInfo, Snapshot
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.sources.nvml_mig import activity_from_instances
from gpuscope.exporter.testing.fake_nvml import FakeGpu, FakeMigDevice, h100_node, make_fake_pynvml, mig_layout
from gpuscope.exporter.wire import Origin, encode_batch, encode_binary, to_body

ORIGIN = Origin("c", "r", "node-7", "nvml", str(uuid.uuid4()))
WINDOW = (time.time() - 86400, time.time())


def mig_node() -> list[FakeGpu]:
    """GPU 0 whole; GPU 1 split 3g + 1g + 1g, the last 1g busy only 12% of the time."""
    gpus = h100_node(2)
    mig_layout(gpus[1], ["3g.40gb", "1g.10gb", "1g.10gb"])
    gpus[1].mig_devices[2].gpm_sm_util = 12.0
    return gpus


def readings(gpus: list[FakeGpu], cycles: int = 3) -> list[tuple[GpuReading, ...]]:
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    try:
        source.read(0.0)  # GPM needs two samples before it reports
        return [source.read(float(n))[0] for n in range(1, cycles + 1)]
    finally:
        source.close()


def decode(snapshots: list[Snapshot], version: int) -> Batch:
    if version == 1:
        return json_v1.decode(json_v1_body(snapshots), WINDOW)
    return binary_v2.decode(encode_binary(ORIGIN, 1, snapshots), WINDOW)


def json_v1_body(snapshots: list[Snapshot]) -> bytes:
    return gzip.decompress(to_body(encode_batch(ORIGIN, 1, snapshots)))


def test_a_mig_gpus_activity_is_its_instances_weighted_by_slices() -> None:
    """Where NVML gives no activity for the MIG GPU itself, it is its GPU instances', each for its share."""
    _, parent = readings(mig_node(), cycles=1)[0]
    assert [(m.slices, m.gpu_slices) for m in parent.mig] == [(3, 7), (1, 7), (1, 7)]
    values: dict[str, float] = {}
    activity_from_instances(parent.mig, values)
    # (40% x 3 slices + 40% x 1 + 12% x 1) / the GPU's 7 slices: the free slice counts as idle
    assert values["sm_active_pct"] == pytest.approx((40 * 3 + 40 + 12) / 7)
    assert values["tensor_active_pct"] == pytest.approx(21 * 5 / 7)
    kept = {"sm_active_pct": 55.0}
    activity_from_instances(parent.mig, kept)
    assert kept["sm_active_pct"] == 55.0, "the GPU's own reading, where NVML gives one, stands"
    assert "util_pct" not in parent.values, "NVML has no utilisation in MIG mode: none is made up"


def test_a_compute_instance_has_its_own_slices_and_shares_its_gpu_instance() -> None:
    gpus = h100_node(1)
    gpus[0].mig_enabled = True
    gpus[0].mig_devices = [
        FakeMigDevice(f"MIG-split-{ci}", gpu_instance_id=1, compute_instance_id=ci, profile="1c.3g.40gb", gpu_slices=3)
        for ci in (0, 1)
    ]
    [parent] = readings(gpus, cycles=1)[0]
    assert [(m.profile, m.slices, m.instance_slices) for m in parent.mig] == [("3g.40gb", 1, 3)] * 2
    assert "mig_sm_active_pct" in parent.mig[0].values and "mig_sm_active_pct" not in parent.mig[1].values
    values: dict[str, float] = {}
    activity_from_instances(parent.mig, values)
    assert values["sm_active_pct"] == pytest.approx(40 * 3 / 7), "the GPU instance counted once"


@pytest.mark.parametrize("version", [1, 2])
def test_mig_devices_their_rows_and_jobs_reach_the_collector(version: int) -> None:
    gpus = mig_node()
    cycles = readings(gpus)
    whole_job, slice_job = JobInfo("4711", "ada"), JobInfo("ml/train", namespace="ml", pod="train-0")
    snapshots = [
        Snapshot(
            ts=WINDOW[1] - 10 + n,
            gpus=gpu_readings,
            ports=(),
            # Slurm's rule gives a MIG GPU the first job of its instances: it must not travel as the GPU's
            jobs={0: whole_job, 1: slice_job},
            mig_jobs={gpus[1].mig_devices[1].uuid: slice_job},
        )
        for n, gpu_readings in enumerate(cycles)
    ]
    batch = decode(snapshots, version)
    assert batch.migs == tuple(
        MigInfo(1, m.gpu_instance_id, 0, m.uuid, m.profile, m.gpu_slices, 7) for m in gpus[1].mig_devices
    )
    samples = batch.mig_samples
    assert samples is not None and len(samples) == 9
    assert samples.device.tolist() == [0, 1, 2] * 3
    assert samples.values["sm_active_pct"].tolist() == [40.0, 40.0, 12.0] * 3
    assert samples.values["fb_total_bytes"][0] == gpus[1].mig_devices[0].memory_mib * 2**20
    assert samples.job is not None
    jobs = [batch.jobs[j] if j >= 0 else None for j in samples.job.tolist()]
    assert [j.job_id if j else None for j in jobs] == [None, "ml/train", None] * 3
    gpu_jobs = batch.gpu_samples.job
    assert gpu_jobs is not None
    by_gpu = {
        int(d): (batch.jobs[j].job_id if j >= 0 else None)
        for d, j in zip(batch.gpu_samples.device, gpu_jobs, strict=True)
    }
    assert by_gpu == {0: "4711", 1: None}, "the MIG GPU's work is its instances'; the whole GPU keeps its job"


@pytest.mark.parametrize("version", [1, 2])
def test_a_node_without_mig_sends_no_mig_members(version: int) -> None:
    cycles = readings(h100_node(2), cycles=1)
    batch = decode([Snapshot(ts=WINDOW[1] - 1, gpus=cycles[0], ports=(), jobs={})], version)
    assert batch.migs == () and batch.mig_samples is None
    assert "migs" not in encode_batch(ORIGIN, 1, [Snapshot(ts=WINDOW[1] - 1, gpus=cycles[0], ports=())])


def test_mig_devices_without_mig_attribution_carry_no_jobs() -> None:
    """The simulator's attribution names whole GPUs only (mig_jobs None): MIG rows go without a job
    column, so the collector leaves MIG allocations alone, and the GPU keeps its own job."""
    gpus = mig_node()
    [cycle] = readings(gpus, cycles=1)
    snap = Snapshot(ts=WINDOW[1] - 1, gpus=cycle, ports=(), jobs={1: JobInfo("9")})
    batch = decode([snap], 2)
    assert batch.mig_samples is not None and batch.mig_samples.job is None
    assert batch.gpu_samples.job is not None
    assert np.array_equal(batch.gpu_samples.job, [-1, 0])
