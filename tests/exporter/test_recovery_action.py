"""The driver's recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, field 230) from NVML to the database:
read in the cycle's one field-values call through the fake pynvml (per-field statuses, as the driver
answers), absent (never 0) where the driver lacks the field and asked again only rarely, on /metrics,
on the wire in both versions, and stored by a real collector; the simulator's XID 79 carries it."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import psycopg
import pynvml
import pytest

from gpuscope.exporter.exposition import ExporterIdentity, Exposition
from gpuscope.exporter.sim.health import Incident, SimGpuHealth
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, Snapshot
from gpuscope.exporter.sources import nvml_recovery
from gpuscope.exporter.sources.nvml import NvmlSource
from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml
from gpuscope.exporter.wire import Origin, encode_batch, encode_binary
from tests.collector.helpers import post, push_binary
from tests.processes import RunningCollector

FIELD = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
NODE_REBOOT, DRAIN_P2P = pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_P2P


def asked_fields(fake: Any) -> list[list[int]]:
    """Records the field ids of each nvmlDeviceGetFieldValues call (one list per call)."""
    calls: list[list[int]] = []
    inner = fake.nvmlDeviceGetFieldValues

    def recording(handle: Any, requests: list[Any]) -> Any:
        calls.append([r[0] if isinstance(r, tuple) else r for r in requests])
        return inner(handle, requests)

    fake.nvmlDeviceGetFieldValues = recording
    return calls


def test_the_fake_answers_the_field_in_its_own_status_as_nvml_does() -> None:
    gpus = h100_node(2)
    gpus[0].recovery_action = NODE_REBOOT
    gpus[1].unsupported.add("recovery_action")
    fake = make_fake_pynvml(gpus)
    fake.nvmlInit()
    for index, (status, value) in enumerate(
        [(pynvml.NVML_SUCCESS, NODE_REBOOT), (pynvml.NVML_ERROR_NOT_SUPPORTED, None)]
    ):
        handle = fake.nvmlDeviceGetHandleByIndex(index)
        memory_temp, recovery = fake.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_MEMORY_TEMP, FIELD])
        assert memory_temp.nvmlReturn == pynvml.NVML_SUCCESS, "the call itself succeeds"
        assert recovery.nvmlReturn == status
        if value is not None:
            assert (recovery.valueType, recovery.value.uiVal) == (pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, value)


def test_the_value_rides_in_the_one_field_call_and_follows_the_driver() -> None:
    gpus = h100_node(2)
    fake = make_fake_pynvml(gpus)
    calls = asked_fields(fake)
    source = NvmlSource(fake, xid_events=False)
    calls.clear()  # opening asked each GPU its NVLink count
    first = source.read(0.0)[0]
    assert [r.values["recovery_action"] for r in first] == [0.0, 0.0], "none: the driver checked, nothing to do"
    assert len(calls) == 2 and all(FIELD in ids for ids in calls), "one call per GPU, with the field in it"
    gpus[1].recovery_action = NODE_REBOOT
    second = source.read(1.0)[0]
    assert [r.values["recovery_action"] for r in second] == [0.0, float(NODE_REBOOT)]
    assert len(calls) == 4
    source.close()


def test_an_older_driver_leaves_it_absent_not_zero_and_is_asked_again_rarely(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_recovery, "ASK_AGAIN_CYCLES", 5)
    gpus = h100_node(1)
    gpus[0].unsupported.add("recovery_action")
    fake = make_fake_pynvml(gpus)
    calls = asked_fields(fake)
    source = NvmlSource(fake, xid_events=False)
    calls.clear()  # opening asked each GPU its NVLink count
    [reading] = source.read(0.0)[0]
    assert "recovery_action" not in reading.values
    assert reading.values["mem_temp_c"] == 78, "its neighbours in the call are read"
    for t in range(1, 5):
        [reading] = source.read(float(t))[0]
        assert "recovery_action" not in reading.values
    assert [FIELD in ids for ids in calls] == [True, False, False, False, False], "dropped from the request"
    gpus[0].unsupported.discard("recovery_action")  # e.g. the GPU left a mode without it
    [reading] = source.read(5.0)[0]
    assert FIELD in calls[-1] and reading.values["recovery_action"] == 0.0, "asked again after the pause"
    source.close()


@pytest.mark.parametrize("status", [pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_UNKNOWN])
def test_an_unknown_field_id_is_unsupported_and_a_passing_failure_is_not(status: int) -> None:
    fake = make_fake_pynvml(h100_node(1))
    calls = asked_fields(fake)
    inner = fake.nvmlDeviceGetFieldValues

    def failing(handle: Any, requests: list[Any]) -> Any:
        values = inner(handle, requests)
        for value in values:
            if value.fieldId == FIELD:
                value.nvmlReturn = status
        return values

    fake.nvmlDeviceGetFieldValues = failing
    source = NvmlSource(fake, xid_events=False)
    calls.clear()  # opening asked each GPU its NVLink count
    source.read(0.0)
    [reading] = source.read(1.0)[0]
    assert "recovery_action" not in reading.values
    asked_again = status == pynvml.NVML_ERROR_UNKNOWN
    assert (FIELD in calls[-1]) is asked_again
    source.close()


def test_prometheus_shows_the_gauge_next_to_the_other_gpu_gauges() -> None:
    gpus = h100_node(2)
    gpus[1].recovery_action = DRAIN_P2P
    source = NvmlSource(make_fake_pynvml(gpus), xid_events=False)
    readings, ports = source.read(0.0)
    source.close()
    snapshot = Snapshot(ts=time.time(), gpus=readings, ports=ports)
    body = Exposition(ExporterIdentity("c", "r", "n", "nvml", "test"), lambda: snapshot).render(None)[0].decode()
    lines = [line for line in body.splitlines() if "gpuscope_gpu_recovery_action" in line]
    assert lines[:2] == [
        "# HELP gpuscope_gpu_recovery_action " + lines[0].split(" ", 3)[3],
        "# TYPE gpuscope_gpu_recovery_action gauge",
    ]
    values = [line.rsplit(" ", 1)[1] for line in lines[2:]]
    assert values == ["0", "3"] or values == ["0.0", "3.0"], lines


def reading(index: int, recovery_action: float | None) -> GpuReading:
    values = {"temp_c": 60.0}
    if recovery_action is not None:
        values["recovery_action"] = recovery_action
    return GpuReading(GpuIdentity(index, f"GPU-recovery-{index}", "NVIDIA H100 80GB HBM3", "-"), True, values)


def snapshot(ts: float, *gpus: GpuReading) -> Snapshot:
    return Snapshot(ts=ts, gpus=gpus, ports=())


def test_the_wire_carries_it_and_leaves_it_out_where_no_gpu_reported_it() -> None:
    origin = Origin("c", "r", "n", "nvml", "e")
    batch = encode_batch(origin, 1, [snapshot(1.0, reading(0, 2.0), reading(1, None))])
    assert batch["gpu_samples"]["values"]["recovery_action"] == [2.0, None]  # type: ignore[index]
    old = encode_batch(origin, 2, [snapshot(1.0, reading(0, None), reading(1, None))])
    assert "recovery_action" not in old["gpu_samples"]["values"], "as an exporter before the field"  # type: ignore[operator]
    binary = encode_binary(origin, 3, [snapshot(1.0, reading(0, 2.0))])
    header = json.loads(binary[8 : 8 + int.from_bytes(binary[4:8], "little")])
    assert "recovery_action" in header["gpu_samples"]["values"], "version 2 lists it among the value columns"


def test_the_collector_stores_it_from_both_versions_and_null_from_an_older_exporter(
    collector: RunningCollector,
) -> None:
    now = time.time()
    origin = Origin("c", "r", "node-recovery", "nvml", str(uuid.uuid4()))
    v1 = encode_batch(origin, 1, [snapshot(now - 3, reading(0, 0.0), reading(1, 2.0))])
    response = post(collector, v1)
    assert response.status_code == 200 and response.json()["ignored_fields"] == [], response.text
    push_binary(collector, origin, 2, [snapshot(now - 2, reading(0, 4.0), reading(1, None))])
    older = encode_batch(origin, 3, [snapshot(now - 1, reading(0, None), reading(1, None))])
    assert post(collector, older).status_code == 200
    with psycopg.connect(collector.dsn) as conn:
        rows = conn.execute(
            "SELECT g.gpu_index, s.recovery_action FROM gpu_sample s JOIN gpu g USING (gpu_id)"
            " ORDER BY s.ts, g.gpu_index"
        ).fetchall()
    assert rows == [(0, 0), (1, 2), (0, 4), (1, None), (0, None), (1, None)]


def test_the_collector_refuses_a_value_out_of_range(collector: RunningCollector) -> None:
    batch = encode_batch(
        Origin("c", "r", "n", "nvml", str(uuid.uuid4())), 1, [snapshot(time.time() - 1, reading(0, 2.0))]
    )
    batch["gpu_samples"]["values"]["recovery_action"] = [-1]  # type: ignore[index]
    response = post(collector, batch)
    assert response.status_code == 422 and "recovery_action" in response.text, response.text


def test_the_simulated_driver_asks_for_a_reboot_after_an_xid_79_and_a_reset_after_an_xid_95() -> None:
    health = SimGpuHealth(seed=1, node_index=0, gpus=3)
    assert [v["recovery_action"] for v in health.values()] == [0.0, 0.0, 0.0]
    health.record(1, Incident(0.0, (79,)))
    health.record(2, Incident(0.0, (48, 63, 95), uncorrectable=True))
    assert [v["recovery_action"] for v in health.values()] == [0.0, 2.0, 1.0]
    health.advance(job_running=False, dt=0.0)  # the epilog resets the GPUs; a reboot it cannot do
    assert [v["recovery_action"] for v in health.values()] == [0.0, 2.0, 0.0]
