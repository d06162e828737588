"""The detector on jobs drawn at sub-step resolution: samples shorter than a step, the traffic a step
sends, phases every rank takes together, and rail-optimised nodes with a NIC per GPU. Each case is a
failure the detector once had (see docs/stragglers.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from gpuscope.stragglers.detector import SW_POWER_CAP, JobDetector, Settings
from gpuscope.stragglers.events import Findings, Straggler
from gpuscope.stragglers.readings import Readings

TICK = 0.05  # seconds of model time per grid point
ONSET, END, DURATION = 1500.0, 2400.0, 3000.0


@dataclass
class Job:
    """A data-parallel job: every rank computes for `compute_s` (the culprit longer), then all wait for
    the slowest and exchange gradients for `comm_s`, sending `step_bytes` from every port."""

    nodes: int = 3
    gpus_per_node: int = 4
    ports_per_node: int = 1
    compute_s: float = 3.0
    comm_s: float = 0.5
    step_bytes: float = 5e9

    @property
    def ranks(self) -> int:
        return self.nodes * self.gpus_per_node


def run(job: Job, sample_s: float, slower: dict[int, float] | None = None, **extra: float) -> list[Straggler]:
    """Feed the detector `job` sampled every `sample_s`; `slower` makes ranks compute that much longer
    between ONSET and END (power-capped: their reason bit is set while they compute). `extra`:
    `job_slower` (every rank, ONSET to END, with `extra_bytes_s` more sent per port and `all_waits`
    on every port), `comm_slower` (the exchange, ONSET to END, with `slow_port`'s link trained down),
    `pause_level` (every rank's activity at that fraction from ONSET for 90 s)."""
    t = np.arange(0, DURATION, TICK)
    compute = np.full((job.ranks, t.size), job.compute_s)
    during = (t >= ONSET) & (t < END)
    for rank, factor in (slower or {}).items():
        compute[rank, during] *= 1 + factor
    compute[:, during] *= 1 + extra.get("job_slower", 0.0)
    comm = np.where(during, job.comm_s * (1 + extra.get("comm_slower", 0.0)), job.comm_s)
    step = compute.max(axis=0) + comm
    phase = np.zeros(t.size)  # time into the current step, stepped in model time
    for i in range(1, t.size):
        phase[i] = (phase[i - 1] + TICK) % step[i]
    computing = phase[None, :] < compute
    sending = phase >= step - comm
    tensor = 60.0 * computing
    pause = (t >= ONSET) & (t < ONSET + 90) if "pause_level" in extra else np.zeros(t.size, bool)
    tensor[:, pause] *= extra.get("pause_level", 1.0)
    ports = job.nodes * job.ports_per_node
    sent = np.broadcast_to(sending * job.step_bytes / comm, (ports, t.size)).copy()
    sent[:, during] += extra.get("extra_bytes_s", 0.0)
    waits = np.full((ports, t.size), 1e4)
    waits[:, during] *= extra.get("all_waits", 1.0)
    waits[ports // 2, during] *= extra.get("all_waits", 1.0) ** 2
    link = np.full((ports, t.size), 400.0)
    if "slow_port" in extra:
        link[int(extra["slow_port"]), during] = 100.0
    reasons = np.where(computing & (compute > job.compute_s * 1.01) & during, SW_POWER_CAP, 0)

    node_of = np.arange(job.ranks) // job.gpus_per_node
    port_node = np.arange(ports) // job.ports_per_node
    detector = JobDetector.for_ranks(node_of, Settings(sample_s=sample_s), port_node=port_node)
    per_sample = round(sample_s / TICK)
    rng = np.random.default_rng(0)
    findings = Findings()
    for end in range(per_sample, t.size + 1, per_sample):
        window = slice(end - per_sample, end)
        noise = 1 + 0.01 * rng.standard_normal(job.ranks)
        readings = Readings(
            float(t[end - 1]),
            work=tensor[:, window].mean(axis=1) * noise,
            util_pct=np.full(job.ranks, 99.0),
            sm_clock_mhz=np.where(reasons[:, window].any(axis=1), 1500.0, 1980.0),
            clock_event_reasons=np.bitwise_or.reduce(reasons[:, window], axis=1).astype(float),
            xmit_wait_per_s=waits[:, window].mean(axis=1),
            link_gbps=link[:, window].min(axis=1),
            xmit_bytes_per_s=sent[:, window].mean(axis=1),
        )
        findings.add(detector.update(readings))
    return findings.stragglers


@pytest.mark.parametrize("sample_s", [1.0, 5.0])
def test_samples_shorter_than_a_step_still_read_the_slowdown(sample_s: float) -> None:
    # 1 s samples of 3.5 s steps: some fall wholly inside the exchange (no activity). Gating those out
    # as pauses, and taking the median of skewed single samples as the normal, hid a 20% slowdown.
    job = Job()
    culprit = 6  # node 1, GPU 2
    truth = (job.compute_s * 1.28 + job.comm_s) / (job.compute_s + job.comm_s) - 1
    [straggler] = run(job, sample_s, slower={culprit: 0.28})
    assert (straggler.node, straggler.gpu, straggler.cause) == (1, 2, "power_cap")
    assert ONSET <= straggler.declared_s <= ONSET + 90
    assert abs(straggler.slowdown - truth) <= 0.25 * truth


@pytest.mark.parametrize("sample_s", [1.0, 5.0])
def test_a_clean_job_sampled_faster_than_its_steps_is_quiet(sample_s: float) -> None:
    assert run(Job(), sample_s) == []


def test_a_job_wide_slowdown_with_more_traffic_and_waits_everywhere_is_no_straggler() -> None:
    # An asynchronous checkpoint: background writers slow every rank, every port sends to storage
    # against a busy filesystem, and one port's waits rise more than the others'.
    declared = run(Job(nodes=6), 5.0, job_slower=0.12, extra_bytes_s=1e9, all_waits=10.0)
    assert declared == []


def test_a_phase_that_stops_most_work_is_a_pause_not_a_straggler() -> None:
    # Rank 0 writing a checkpoint while every other rank waits in a barrier: activity at 15% of normal.
    assert run(Job(), 5.0, pause_level=0.15) == []


def test_a_slow_nic_on_a_rail_optimised_node_is_named_by_its_port() -> None:
    job = Job(nodes=2, gpus_per_node=8, ports_per_node=8, comm_s=1.0)
    # A link trained down to a quarter: its rail's ring, and so every rank's exchange, takes longer.
    [straggler] = run(job, 5.0, comm_slower=1.0, slow_port=11)
    assert (straggler.node, straggler.gpu, straggler.port, straggler.cause) == (1, None, 11, "slow_nic")
