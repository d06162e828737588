"""A GPU whose identity the exporter does not know (NVML would not open it at start: uuid, model and
pci_bus_id sent empty) keeps the identity the collector stored, in both encodings; a known identity
still replaces it (a GPU swapped at that index)."""

from __future__ import annotations

import time
import uuid

import psycopg

from gpuscope.core.ingest_wire import BINARY_CONTENT_TYPE
from gpuscope.exporter.events import EventTracker
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.sources.nvml import SLOW_EVERY, NvmlSource
from gpuscope.exporter.testing.fake_nvml import FakeGpu, h100_node, make_fake_pynvml
from gpuscope.exporter.wire import Origin, encode_batch, encode_binary
from tests.collector.helpers import post
from tests.processes import RunningCollector

NAME = "NVIDIA H100 80GB HBM3"


def identities(collector: RunningCollector) -> dict[int, tuple[int, str, str, str]]:
    """GPU index -> (gpu_id, uuid, model, pci_bus_id) as stored."""
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute("SELECT gpu_index, gpu_id, uuid, model, pci_bus_id FROM gpu").fetchall()
    return {index: (gpu_id, uuid, model, pci) for index, gpu_id, uuid, model, pci in rows}


class Exporter:
    """One exporter process over the fake NVML: its source, event tracker, id and batch numbers."""

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
        self.tracker = EventTracker()
        self.origin = Origin("test", "r", "node-000", "nvml", str(uuid.uuid4()))
        self.seq = 0

    def push(self, collector: RunningCollector, cycles: int = 1, binary: bool = True) -> None:
        snapshots, events = [], []
        for _ in range(cycles):
            now = time.time()
            snapshot = Snapshot(ts=now, gpus=self.source.read(now)[0], ports=())
            snapshots.append(snapshot)
            events += self.tracker.observe(snapshot)
        self.seq += 1
        if binary:
            body = encode_binary(self.origin, self.seq, snapshots, events)
            response = post(collector, body, **{"Content-Type": BINARY_CONTENT_TYPE})
        else:
            response = post(collector, encode_batch(self.origin, self.seq, snapshots, events))
        assert response.status_code == 200, response.text


def test_a_gpu_not_opened_at_start_keeps_its_stored_identity(collector: RunningCollector) -> None:
    gpus = h100_node(2)
    first = Exporter(gpus)
    first.push(collector)
    known = identities(collector)
    assert known[1][1:] == (gpus[1].uuid, NAME, gpus[1].bus_id)

    gpus[1].lost = True  # the exporter restarts while GPU 1 will not answer: it cannot tell its UUID
    restarted = Exporter(gpus)
    assert restarted.source.read(0.0)[0][1].gpu == GpuIdentity(1, "", "", "")
    restarted.push(collector, binary=False)
    restarted.push(collector)
    assert identities(collector) == known, "nothing overwritten by an identity that is not known"
    with psycopg.connect(collector.dsn) as conn:
        down = conn.execute("SELECT count(*) FROM gpu_sample WHERE gpu_id = %s AND NOT up", (known[1][0],)).fetchone()
    assert down == (2,), "its samples are stored, under the GPU's own id"

    gpus[1].lost = False
    restarted.push(collector, cycles=SLOW_EVERY)  # tried again on the slow cadence: it opens
    assert identities(collector) == known
    with psycopg.connect(collector.dsn) as conn:
        events = conn.execute("SELECT gpu_id, kind FROM event").fetchall()
    assert events == [(known[1][0], "gpu_recovered")]


def test_a_gpu_first_seen_without_identity_gets_it_later_and_a_swapped_gpu_replaces_it(
    collector: RunningCollector,
) -> None:
    gpus = h100_node(2)
    gpus[0].no_permission = True  # refused at start: never known to this collector
    exporter = Exporter(gpus)
    exporter.push(collector)
    assert identities(collector)[0][1:] == ("", "", "")

    gpus[0].no_permission = False
    exporter.push(collector, cycles=SLOW_EVERY)  # it opens in the last cycle of this batch
    exporter.push(collector)  # a batch names each GPU as its first snapshot does: known from this one
    gpu_id = identities(collector)[0][0]
    assert identities(collector)[0] == (gpu_id, gpus[0].uuid, NAME, gpus[0].bus_id)

    swapped = [FakeGpu(uuid="GPU-ffffffff-0000-4000-8000-000000000000", name="NVIDIA H200", bus_id=gpus[0].bus_id)]
    Exporter([*swapped, gpus[1]]).push(collector)
    assert identities(collector)[0] == (gpu_id, swapped[0].uuid, "NVIDIA H200", gpus[0].bus_id)


def test_each_part_of_an_identity_is_kept_on_its_own(collector: RunningCollector) -> None:
    origin = Origin("test", "r", "node-000", "sim", str(uuid.uuid4()))

    def push(seq: int, gpu: GpuIdentity) -> None:
        snapshot = Snapshot(ts=time.time(), gpus=(GpuReading(gpu, True, values={"power_w": 100.0}),), ports=())
        assert post(collector, encode_batch(origin, seq, [snapshot])).status_code == 200

    push(1, GpuIdentity(0, "GPU-a", "H100", "00:18"))
    push(2, GpuIdentity(0, "", "H100 SXM", ""))
    assert identities(collector)[0][1:] == ("GPU-a", "H100 SXM", "00:18")
