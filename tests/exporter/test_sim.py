"""The simulated cluster: deterministic, H100-like, synchronous jobs with idle gaps between them."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.sim.jobs import EPOCH_SECONDS

T0 = 1_790_000_000.0  # a fixed instant, so the tests do not depend on when they run


def run_node(seed: int, node_index: int, times: list[float], nodes: int = 8) -> list[dict[str, float]]:
    topology = build_topology(nodes, 8, 2)
    source = SimNodeSource(topology[node_index], JobSchedule(topology, seed), seed)
    out = []
    for t in times:
        gpus, ports = source.read(t)
        out.append({f"{r.gpu.index}:{k}": v for r in gpus for k, v in r.values.items()})
        out[-1].update({f"{p.port.device}:{k}": v for p in ports for k, v in p.values.items()})
    return out


def test_same_seed_and_times_give_identical_readings() -> None:
    times = [T0 + i for i in range(30)]
    assert run_node(7, 3, times) == run_node(7, 3, times)


def test_different_seeds_differ() -> None:
    times = [T0 + i for i in range(30)]
    assert run_node(7, 3, times) != run_node(8, 3, times)


def test_schedule_agrees_between_independent_instances() -> None:
    topology = build_topology(16, 8, 4)
    a, b = JobSchedule(topology, 5), JobSchedule(topology, 5)
    for t in np.linspace(T0, T0 + 3 * EPOCH_SECONDS, 200):
        for node in range(16):
            assert a.job_at(node, t) == b.job_at(node, t)


def test_readings_stay_in_h100_ranges() -> None:
    topology = build_topology(8, 8, 2)
    schedule = JobSchedule(topology, 11)
    for node in topology:
        source = SimNodeSource(node, schedule, 11)
        for t in np.arange(T0, T0 + 1800, 5.0):
            gpus, ports = source.read(float(t))
            assert len(gpus) == 8 and len(ports) == 8
            for reading in gpus:
                v = reading.values
                assert 0 < v["power_w"] <= 700
                assert 30 <= v["temp_c"] <= 85
                assert 0 < v["sm_clock_mhz"] <= 1980
                assert 0 <= v["util_pct"] <= 100
                assert 0 <= v["tensor_active_pct"] <= v["sm_active_pct"] <= 100
                assert v["fb_used_bytes"] <= v["fb_total_bytes"]


def test_jobs_span_several_nodes_and_leave_idle_gaps() -> None:
    topology = build_topology(16, 8, 4)
    schedule = JobSchedule(topology, 42)
    jobs = schedule.jobs_between(T0, T0 + 4 * 3600)
    assert any(job.ranks > 1 for job in jobs), "expected multi-node jobs"
    by_nodes: dict[tuple[int, ...], list] = {}
    for job in jobs:
        by_nodes.setdefault(job.nodes, []).append(job)
    gaps = [b.start - a.end for runs in by_nodes.values() for a, b in itertools.pairwise(runs)]
    assert gaps and min(gaps) > 0, "consecutive jobs on the same nodes must not overlap"


def test_every_rank_of_a_job_waits_for_the_slowest() -> None:
    """A synchronous step: the permanently heavier last stage computes longest, the others wait."""
    topology = build_topology(16, 8, 4)
    schedule = JobSchedule(topology, 42)
    job = next(j for j in schedule.jobs_between(T0, T0 + 4 * 3600) if j.ranks >= 2)
    t = job.start + 60
    sources = {n: SimNodeSource(topology[n], schedule, 42) for n in job.nodes}
    tensor = {
        n: np.mean([sources[n].read(t + i)[0][0].values["tensor_active_pct"] for i in range(20)]) for n in job.nodes
    }
    util = {n: sources[n].read(t + 30)[0][0].values["util_pct"] for n in job.nodes}
    last = job.nodes[-1]
    assert all(tensor[last] > tensor[n] for n in job.nodes[:-1])
    assert all(u >= 90 for u in util.values()), "waiting ranks spin in NCCL and still read as busy"


def test_idle_gpus_look_idle() -> None:
    topology = build_topology(16, 8, 4)
    schedule = JobSchedule(topology, 42)
    jobs = schedule.jobs_between(T0, T0 + 4 * 3600)
    node = jobs[0].nodes[0]
    gap_time = next(t for t in np.arange(T0, T0 + 4 * 3600, 10.0) if schedule.job_at(node, float(t)) is None)
    gpus, _ = SimNodeSource(topology[node], schedule, 42).read(float(gap_time))
    assert all(r.values["util_pct"] == 0 and r.values["power_w"] < 100 for r in gpus)


def test_topology_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="racks"):
        build_topology(2, 8, 3)
    with pytest.raises(ValueError):
        build_topology(0, 8, 1)


def test_nvlink_and_fault_streams_leave_the_other_readings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVLink and the rare faults draw from their own streams: reseeding them changes only their own keys."""
    from gpuscope.exporter.sim import node as sim_node
    from gpuscope.exporter.sim.health import SimGpuHealth
    from gpuscope.exporter.sim.nvlink import TOTAL_KEYS, SimNvLink

    times = [T0 + 60 * i for i in range(240)]
    before = run_node(7, 3, times)
    monkeypatch.setattr(sim_node, "SimNvLink", lambda seed, index, gpus: SimNvLink(seed + 1, index, gpus))
    monkeypatch.setattr(sim_node, "SimGpuHealth", lambda seed, index, gpus: SimGpuHealth(seed + 1, index, gpus))
    after = run_node(7, 3, times)
    own = {*TOTAL_KEYS, "nvlink_crc_flit_errors", "nvlink_crc_data_errors", "ecc_corrected", "ecc_uncorrected"}
    own |= {"remapped_rows_correctable"}
    own |= {"remapped_rows_uncorrectable", "remap_pending", "remap_failure"}
    changed = {key.split(":", 1)[1] for b, a in zip(before, after, strict=True) for key in b if b[key] != a[key]}
    assert changed and changed <= own, changed
