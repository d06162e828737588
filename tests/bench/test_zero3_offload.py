"""zero3_offload: ZeRO-3 with the optimizer on the host. The case keeps the contract (shapes, units,
counters, ground truth, determinism), and the model keeps its physics: every GPU idles through the
offload phase while InfiniBand is quiet, the phase is 20-60% of the step, a slow host lengthens it for
everyone, and a fault there cannot be told apart where the others wait on the host too."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gpuscope.bench.workloads import GPU_KEYS, PORT_KEYS, TARGET_SLOWDOWNS, Case, _common, zero3_offload
from gpuscope.bench.workloads._gpu import COMPUTE, DEEP, IDLE, LIGHT, SPIN, electrical

FAMILY = zero3_offload.FAMILY
KINDS = {"thermal", "power_cap", "gpu_degraded", "slow_nic", "slow_host"}
CLEAN = [s for s in range(32) if _common.design(FAMILY, s) is None]
FAULTY = [s for s in range(32) if _common.design(FAMILY, s) is not None]


@pytest.fixture(scope="module")
def cases() -> Iterator[dict[int, Case]]:
    yield {seed: zero3_offload.generate(seed) for seed in range(32)}


def _during(case: Case) -> np.ndarray:
    (fault,) = case.faults
    return (case.times > fault.onset_s + 2 * case.sample_s) & (case.times < fault.end_s) & np.isfinite(case.step_s)


@pytest.mark.parametrize("seed", [CLEAN[0], *FAULTY[:2]])
def test_contract(cases: dict[int, Case], seed: int) -> None:
    case = cases[seed]
    T = len(case.times)
    assert case.family == FAMILY and case.synchronous
    assert set(case.telemetry) == set(GPU_KEYS) | set(PORT_KEYS)
    assert 3600 <= case.duration_s <= 10800 and 5 <= case.sample_s <= 30
    assert np.allclose(case.times, case.sample_s * (1 + np.arange(T)))
    for key in GPU_KEYS:
        assert case.telemetry[key].shape == (case.ranks, T), key
    for key in PORT_KEYS:
        assert case.telemetry[key].shape == (case.ports, T), key
    assert case.ports in (case.nodes, case.ranks)
    assert set(case.port_node.tolist()) == set(range(case.nodes))
    tel = case.telemetry
    for key in ("xmit_bytes", "xmit_wait"):
        for row in tel[key]:
            seen = row[~np.isnan(row)]
            assert np.all(np.diff(seen) >= 0), key
    for key in ("util_pct", "sm_active_pct", "tensor_active_pct"):
        assert np.nanmin(tel[key]) >= 0 and np.nanmax(tel[key]) <= 100, key
    assert np.nanmin(tel["power_w"]) > 20 and np.nanmax(tel["power_w"]) < 750
    assert np.nanmin(tel["sm_clock_mhz"]) >= 100 and np.nanmax(tel["sm_clock_mhz"]) <= 1980
    assert np.nanmin(tel["temp_c"]) > 10 and np.nanmax(tel["temp_c"]) < 100
    bits = tel["clock_event_reasons"][~np.isnan(tel["clock_event_reasons"])]
    assert np.all(bits == np.round(bits)) and np.all((bits.astype(int) & ~0x6D) == 0)
    assert set(np.unique(tel["rate_gbps"][~np.isnan(tel["rate_gbps"])])) <= {50.0, 100.0, 200.0, 400.0}
    for key, arr in tel.items():
        assert 0 < np.isnan(arr).mean() < 0.2, key
    steps = case.step_s[np.isfinite(case.step_s)]
    assert len(steps) > 0.5 * T and np.all(steps > 0)


def test_ground_truth_follows_the_design(cases: dict[int, Case]) -> None:
    for block in range(2):
        targets = [_common.design(FAMILY, 16 * block + i) for i in range(16)]
        assert targets.count(None) == 4 and all(targets.count(t) == 3 for t in TARGET_SLOWDOWNS)
    for seed, case in cases.items():
        target = _common.design(FAMILY, seed)
        ratio = case.step_s / case.clean_step_s
        if target is None:
            assert case.faults == [] and np.nanmax(np.abs(ratio - 1)) < 1e-9
            continue
        (fault,) = case.faults
        assert fault.kind in KINDS and fault.target_slowdown == target
        assert fault.onset_s >= 600 and 180 <= fault.end_s - fault.onset_s <= 2400
        assert abs(fault.true_slowdown / target - 1) < 0.3
        if fault.kind in ("thermal", "power_cap", "gpu_degraded"):
            assert fault.gpu is not None and fault.port is None
        elif fault.kind == "slow_nic":
            assert fault.port is not None and case.port_node[fault.port] == fault.node
        else:
            assert fault.gpu is None and fault.port is None
        # a fault of the offload phase is invisible exactly where the others wait idle on their hosts
        offload_fault = fault.kind == "slow_host" or fault.detail.startswith("PCIe")
        assert fault.localisable == (not offload_fault or case.params["wait"] == "spin")
        starts = case.times - case.sample_s
        inside = (starts >= fault.onset_s) & (case.times <= fault.end_s) & np.isfinite(ratio)
        assert np.mean(ratio[inside]) - 1 == pytest.approx(fault.true_slowdown, rel=0.01)
        outside = (case.times < fault.onset_s) | (starts >= fault.end_s)
        assert np.nanmax(np.abs(ratio[outside] - 1)) < 1e-9


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    seed = FAULTY[0]
    again, first = zero3_offload.generate(seed), cases[seed]
    for key, arr in first.telemetry.items():
        assert np.array_equal(arr, again.telemetry[key], equal_nan=True), key
    assert np.array_equal(first.step_s, again.step_s, equal_nan=True)
    assert first.faults == again.faults and first.decoys == again.decoys


@pytest.mark.parametrize("seed", range(6))
def test_every_gpu_idles_through_the_offload(seed: int) -> None:
    """The offload phase is 20-60% of the step; in it every GPU runs nothing but a few light kernels
    (idle, clocks up or lowered) or waits for the slowest host, and no port sends anything."""
    z, fleet, _ = zero3_offload.draw(_common.rng_for("test", seed))
    st = zero3_offload.evaluate(z, fleet, electrical(fleet))
    S = st.plan.S
    assert 0.15 < st.offload / S < 0.65
    assert np.allclose(st.secs.sum(axis=1), S)
    quiet = st.secs[:, IDLE] + st.secs[:, DEEP] + st.secs[:, LIGHT]
    assert np.all(quiet >= st.t_off - 1e-9)
    assert np.all(st.secs[:, LIGHT] < 0.06 * st.offload)
    assert np.all(st.plan.port_bounds[:, 1] <= 1 - st.offload / S + 1e-9)  # transfers end before the offload
    assert np.all(st.secs[:, COMPUTE] < S - st.offload)


def test_offload_share_shows_in_utilisation(cases: dict[int, Case]) -> None:
    """Measured: the share of samples where a GPU reads low utilisation is about the offload share."""
    for seed in CLEAN[:6]:
        case = cases[seed]
        steady = np.isfinite(case.step_s)
        low = np.nanmean(case.telemetry["util_pct"][:, steady] < 50)
        assert low == pytest.approx(case.params["offload_share"], abs=0.15)


@pytest.mark.parametrize("seed", range(4))
def test_slow_host_makes_everyone_wait(seed: int) -> None:
    """A node whose CPU phase is slower lengthens the step by its own delay; the others wait for it, in the
    gather kernel (spin) or on the host (idle, like the culprit)."""
    z, fleet, _ = zero3_offload.draw(_common.rng_for("test", seed))
    elec = electrical(fleet)
    clean = zero3_offload.evaluate(z, fleet, elec)
    host_f = np.ones(z.nodes)
    host_f[0] = 2.0
    slow = zero3_offload.evaluate(z, fleet, elec, host_f=host_f)
    assert slow.plan.S > clean.plan.S
    assert slow.t_off[0] > clean.t_off[0] and np.allclose(slow.t_off[z.gpn :], clean.t_off[z.gpn :])
    others = slice(z.gpn, None)
    wait = SPIN if z.wait_act == SPIN else IDLE
    assert np.all(slow.secs[others, wait] > clean.secs[others, wait])


def test_slow_host_reads_idle_against_spinning_peers(cases: dict[int, Case]) -> None:
    for seed in range(64):
        case = cases.get(seed) or zero3_offload.generate(seed)
        if not case.faults or case.faults[0].kind != "slow_host" or case.params["wait"] != "spin":
            continue
        fault = case.faults[0]
        if fault.true_slowdown < 0.1:
            continue
        node = slice(fault.node * case.gpus_per_node, (fault.node + 1) * case.gpus_per_node)
        peers = np.array([r for r in range(case.ranks) if r // case.gpus_per_node != fault.node])
        util = case.telemetry["util_pct"]
        during = _during(case)
        assert np.nanmean(util[node][:, during]) < np.nanmean(util[peers][:, during]) - 3
        return
    raise AssertionError("no slow_host seed of 0.1 or more with spinning peers among the first 64")


def test_writeback_contention_is_in_the_clean_step(cases: dict[int, Case]) -> None:
    """After a checkpoint, page-cache writeback slows every node's CPU phase for minutes: a slower step
    (less so where the PCIe copies hide the CPU work) that is normal (clean_step_s), no fault."""
    for seed in CLEAN:
        case = cases[seed]
        windows = case.params["contention"]
        assert isinstance(windows, list)
        if not windows:
            continue
        start, end, _ = max(windows, key=lambda w: w[2])
        mids = case.times - case.sample_s / 2
        inside = (mids > start + case.sample_s) & (mids < end - case.sample_s) & np.isfinite(case.clean_step_s)
        outside = ((mids < start - 300) | (mids > end + 300)) & np.isfinite(case.clean_step_s)
        if inside.sum() < 2:
            continue
        assert np.nanmean(case.clean_step_s[inside]) > 1.01 * np.nanmean(case.clean_step_s[outside])
        assert np.allclose(case.step_s[inside], case.clean_step_s[inside])
        return
    raise AssertionError("no clean seed with writeback contention among the first 32")
