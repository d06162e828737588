"""The straggler workload families (gpuscope.bench.workloads): each case keeps the promised shapes, ranges
and ground truth, and the same seed gives the same case. Cases are kept small by capping ranks x
samples (the scrape interval grows instead), so the module runs in a few seconds."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gpuscope.bench import workloads
from gpuscope.bench.workloads import (
    FAMILIES,
    FAULT_KINDS,
    GPU_KEYS,
    PORT_KEYS,
    TARGET_SLOWDOWNS,
    Case,
    _common,
    _engine,
    generate,
    moe_fsdp,
)
from gpuscope.bench.workloads._gpu import IDLE, SPIN, Fleet, electrical

SMALL = 20_000  # ranks x samples per test case


def _seeds(family: str) -> list[int]:
    """The first clean seed and the first two faulty ones of the family's design."""
    clean = [s for s in range(16) if _common.design(family, s) is None][:1]
    faulty = [s for s in range(16) if _common.design(family, s) is not None][:2]
    return clean + faulty


CASES = [(family, seed) for family in FAMILIES for seed in _seeds(family)]


@pytest.fixture(scope="module")
def small() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", SMALL)
        yield


@pytest.fixture(scope="module")
def cases(small: None) -> dict[tuple[str, int], Case]:
    return {key: generate(*key) for key in CASES}


@pytest.mark.parametrize(("family", "seed"), CASES)
def test_shapes_and_keys(cases: dict[tuple[str, int], Case], family: str, seed: int) -> None:
    case = cases[family, seed]
    T = len(case.times)
    assert case.family == family and case.seed == seed
    assert set(case.telemetry) == set(GPU_KEYS) | set(PORT_KEYS)
    assert 3600 <= case.duration_s <= 10800 and 1 <= case.sample_s <= 30
    assert np.allclose(case.times, case.sample_s * (1 + np.arange(T)))
    for key in GPU_KEYS:
        assert case.telemetry[key].shape == (case.ranks, T), key
    for key in PORT_KEYS:
        assert case.telemetry[key].shape == (case.ports, T), key
    assert case.step_s.shape == case.clean_step_s.shape == (T,)
    assert case.port_node.shape == case.port_gpu.shape == (case.ports,)
    assert set(case.port_node.tolist()) == set(range(case.nodes))
    if family == "rail":
        assert case.ports == case.nodes * case.gpus_per_node
        assert np.array_equal(case.port_gpu, np.tile(np.arange(case.gpus_per_node), case.nodes))
    else:
        assert case.ports == case.nodes and np.all(case.port_gpu == -1)
    telemetry = case.as_telemetry()
    assert telemetry.gpu["util_pct"] is case.telemetry["util_pct"]
    assert len(telemetry.faults) == len(case.faults)


@pytest.mark.parametrize(("family", "seed"), CASES)
def test_counters_are_monotonic_and_values_in_range(cases: dict[tuple[str, int], Case], family: str, seed: int) -> None:
    case = cases[family, seed]
    tel = case.telemetry
    for key in ("xmit_bytes", "xmit_wait"):
        for row in tel[key]:
            seen = row[~np.isnan(row)]
            assert np.all(np.diff(seen) >= 0), key
    for key in ("util_pct", "sm_active_pct", "tensor_active_pct"):
        assert np.nanmin(tel[key]) >= 0 and np.nanmax(tel[key]) <= 100, key
    both = np.isfinite(tel["tensor_active_pct"]) & np.isfinite(tel["sm_active_pct"])
    assert np.all(tel["tensor_active_pct"][both] <= tel["sm_active_pct"][both] + 1e-9)
    assert np.nanmin(tel["power_w"]) > 20 and np.nanmax(tel["power_w"]) < 750
    assert np.nanmin(tel["sm_clock_mhz"]) >= 100 and np.nanmax(tel["sm_clock_mhz"]) <= 1980
    assert np.nanmin(tel["temp_c"]) > 10 and np.nanmax(tel["temp_c"]) < 100
    reasons = tel["clock_event_reasons"]
    seen = reasons[~np.isnan(reasons)]
    assert np.all(seen == np.round(seen)) and np.all((seen.astype(int) & ~0x6D) == 0)  # 0x1 0x4 0x8 0x20 0x40
    assert set(np.unique(tel["rate_gbps"][~np.isnan(tel["rate_gbps"])])) <= {50.0, 100.0, 200.0, 400.0}
    for key, arr in tel.items():  # dropped samples, but not many
        assert 0 < np.isnan(arr).mean() < 0.2, key
    steps = case.step_s[np.isfinite(case.step_s)]
    assert len(steps) > 0.5 * len(case.times) and np.all(steps > 0)


@pytest.mark.parametrize(("family", "seed"), CASES)
def test_ground_truth(cases: dict[tuple[str, int], Case], family: str, seed: int) -> None:
    case = cases[family, seed]
    target = _common.design(family, seed)
    ratio = case.step_s / case.clean_step_s
    if target is None:
        assert case.faults == []
        assert np.nanmax(np.abs(ratio - 1)) < 1e-9
        return
    (fault,) = case.faults
    assert fault.kind in FAULT_KINDS and fault.target_slowdown == target
    assert fault.onset_s >= 600 and 180 <= fault.end_s - fault.onset_s <= 2400 and fault.end_s <= case.duration_s
    assert 0 <= fault.node < case.nodes
    if fault.kind in ("thermal", "power_cap"):
        assert fault.gpu is not None and 0 <= fault.gpu < case.gpus_per_node and fault.port is None
    elif fault.kind == "slow_nic":
        assert fault.gpu is None and fault.port is not None and case.port_node[fault.port] == fault.node
    else:
        assert fault.gpu is None and fault.port is None
    assert abs(fault.true_slowdown / target - 1) < 0.3  # near the requested severity
    # the stated slowdown is the model's: step time over fault-free step time inside the fault
    starts = case.times - case.sample_s
    inside = (starts >= fault.onset_s) & (case.times <= fault.end_s) & np.isfinite(ratio)
    assert inside.sum() >= 3
    assert np.mean(ratio[inside]) - 1 == pytest.approx(fault.true_slowdown, rel=0.01)
    outside = (case.times < fault.onset_s) | (starts >= fault.end_s)
    assert np.nanmax(np.abs(ratio[outside] - 1)) < 1e-9


@pytest.mark.parametrize("family", FAMILIES)
def test_same_seed_same_case(cases: dict[tuple[str, int], Case], small: None, family: str) -> None:
    seed = _seeds(family)[1]
    again = workloads.generate(family, seed)
    first = cases[family, seed]
    for key, arr in first.telemetry.items():
        assert np.array_equal(arr, again.telemetry[key], equal_nan=True), key
    assert np.array_equal(first.step_s, again.step_s, equal_nan=True)
    assert first.faults == again.faults and first.decoys == again.decoys


@pytest.mark.parametrize("family", FAMILIES)
def test_design_is_balanced(family: str) -> None:
    """Per 16 consecutive seeds: 4 clean, 3 at each target slowdown."""
    for block in range(3):
        targets = [_common.design(family, 16 * block + i) for i in range(16)]
        assert targets.count(None) == 4
        assert all(targets.count(t) == 3 for t in TARGET_SLOWDOWNS)


def _culprit_and_peers(case: Case) -> tuple[int, np.ndarray, np.ndarray]:
    (fault,) = case.faults
    assert fault.gpu is not None
    rank = fault.node * case.gpus_per_node + fault.gpu
    during = (case.times > fault.onset_s + 2 * case.sample_s) & (case.times < fault.end_s)
    peers = np.array([r for r in range(case.ranks) if r // case.gpus_per_node != fault.node])
    return rank, peers, during


def _find(family: str, kind: str) -> Case:
    for seed in range(16):
        if _common.design(family, seed) in (0.2, 0.5):
            case = generate(family, seed)
            if case.faults[0].kind == kind:
                return case
    raise AssertionError(f"no {kind} seed among the first 16 of {family}")


@pytest.mark.parametrize("family", ["spin_dp", "yield_dp"])
def test_waiting_looks_like_the_framework(small: None, family: str) -> None:
    """A GPU made slow computes longer (more tensor activity, lower clock); its peers wait: spinning at
    full utilisation in spin_dp, idle (utilisation below the culprit's) in yield_dp."""
    case = _find(family, "power_cap")
    rank, peers, during = _culprit_and_peers(case)
    tel = case.telemetry
    assert np.nanmean(tel["tensor_active_pct"][rank, during]) > np.nanmean(tel["tensor_active_pct"][peers][:, during])
    assert np.nanmean(tel["sm_clock_mhz"][rank, during]) < np.nanmean(tel["sm_clock_mhz"][peers][:, during])
    peer_util = np.nanmean(tel["util_pct"][peers][:, during])
    if family == "spin_dp":
        assert peer_util > 95
    else:
        assert peer_util < np.nanmean(tel["util_pct"][rank, during]) - 5


# ---------------------------------------------------------------------------------------------------------
# moe_fsdp: the physics of the mixture-of-experts step


def _moe(seed: int) -> tuple[moe_fsdp.Moe, Fleet, moe_fsdp.State]:
    m, fleet, _ = moe_fsdp.draw(_common.rng_for(moe_fsdp.FAMILY, seed))
    return m, fleet, moe_fsdp.state(m, electrical(fleet), fleet)


@pytest.mark.parametrize("seed", range(6))
def test_moe_load_imbalance_is_bounded_and_costs_time(seed: int) -> None:
    """Tokens are conserved within an EP group (the loads only move between its ranks), a capacity factor
    caps every rank's load, the per-layer barriers make imbalance cost time, more the wider it is."""
    m, fleet, base = _moe(seed)
    elec = electrical(fleet)
    raw = (m.bias[None, :] + m.nu * m.z).reshape(moe_fsdp.N_MC, m.nodes // m.g, -1)
    assert np.allclose(raw.mean(axis=2), 1.0)
    lam = m.loads()
    assert lam.max() <= m.cap and lam.min() >= moe_fsdp.LAM_MIN
    assert np.mean(lam.max(axis=1)) <= min(m.cap, m.bias.max() + 4 * m.nu)
    balanced = moe_fsdp.state(m, elec, fleet, nu=0.0, bias=np.ones(m.ranks)).plan.S
    assert balanced <= base.plan.S
    if not np.isfinite(m.cap):  # dropless: a wider spread only costs more (with a cap, more is dropped)
        assert base.plan.S <= moe_fsdp.state(m, elec, fleet, nu=2 * m.nu).plan.S
    else:  # the capacity factor bounds what any spread can cost
        wild = moe_fsdp.state(m, elec, fleet, nu=10.0).plan.S
        assert wild <= balanced + m.L * (1 + m.kappa) * m.e0 * m.cap / float(np.min(elec.speed)) * 1.02
    # every rank's step adds up, and the waits are spin (NCCL kernels), not idle
    secs = base.secs
    assert np.allclose(secs.sum(axis=1), base.plan.S)
    assert np.all(secs[:, SPIN] > 0) and np.all(secs[:, IDLE] < 0.05 * base.plan.S)


@pytest.mark.parametrize("seed", range(6))
def test_moe_all_to_all_on_every_port(seed: int) -> None:
    """Every node's NIC carries the dispatch and combine of every layer, forward and backward, plus its
    share of the FSDP gathers and reduce-scatters; the all-to-all's incast makes every port wait a little."""
    m, _, base = _moe(seed)
    assert np.all(base.port_bytes >= 4 * m.L * m.a2a_bytes * (1 + moe_fsdp.LAM_MIN) / 2)
    assert np.all(base.port_bytes >= (2 * m.L - 1) * m.ag_bytes)
    assert np.all(base.port_wait > 0)
    assert base.port_bytes.max() < 1.3 * base.port_bytes.min()


def test_moe_ports_in_telemetry(small: None) -> None:
    case = generate("moe_fsdp", _seeds("moe_fsdp")[0])
    rate = np.diff(case.telemetry["xmit_bytes"], axis=1) / case.sample_s
    steady = np.isfinite(case.step_s[1:]) & np.isfinite(case.step_s[:-1])
    per_port = np.nanmedian(rate[:, steady], axis=1)
    assert np.all(per_port > 1e8)  # far above the background, on every port
    assert per_port.min() > 0.7 * per_port.max()


def test_moe_slow_gpu_makes_everyone_spin(small: None) -> None:
    """A GPU made slow computes longer (more tensor activity, lower clock); its peers wait in NCCL's
    all-to-all and gather kernels, spinning at full utilisation."""
    case = _find("moe_fsdp", "power_cap")
    rank, peers, during = _culprit_and_peers(case)
    tel = case.telemetry
    assert np.nanmean(tel["tensor_active_pct"][rank, during]) > np.nanmean(tel["tensor_active_pct"][peers][:, during])
    assert np.nanmean(tel["sm_clock_mhz"][rank, during]) < np.nanmean(tel["sm_clock_mhz"][peers][:, during])
    assert np.nanmean(tel["util_pct"][peers][:, during]) > 95


def test_moe_slow_nic_shows_on_its_port(small: None) -> None:
    """A downtrained link reports its lower rate; a congested port waits for credits more than any other."""
    case = _find("moe_fsdp", "slow_nic")
    (fault,) = case.faults
    assert fault.port is not None
    during = (case.times > fault.onset_s + 2 * case.sample_s) & (case.times < fault.end_s)
    rate = case.telemetry["rate_gbps"]
    if "trained" in fault.detail:
        assert np.nanmax(rate[fault.port, during]) < np.nanmin(np.delete(rate, fault.port, axis=0)[:, during])
    else:
        wait = np.diff(case.telemetry["xmit_wait"], axis=1)[:, during[1:]]
        per_port = np.nanmean(wait, axis=1)
        assert int(np.argmax(per_port)) == fault.port


def test_moe_hot_expert_is_not_a_fault(small: None) -> None:
    """A hot expert for some minutes: its ranks compute more than before, everyone else waits, the step
    slows, and all of it is in the clean step time (no fault, no slowdown)."""
    for seed in range(64):
        if _common.design("moe_fsdp", seed) is not None:
            continue
        case = generate("moe_fsdp", seed)
        windows = case.params["hot_experts"]
        assert isinstance(windows, list)
        for start, end, ranks, _ in windows:
            during = (case.times - case.sample_s >= start) & (case.times <= end) & np.isfinite(case.step_s)
            before = (case.times < start) & (case.times > start - 1800) & np.isfinite(case.step_s)
            others = [w for w in windows if w[0] != start]
            if during.sum() < 3 or before.sum() < 10 or any(w[0] < end + 1800 and start - 1800 < w[1] for w in others):
                continue
            assert case.faults == [] and "hot_expert" in case.decoys
            assert np.nanmean(case.clean_step_s[during]) > np.nanmean(case.clean_step_s[before])
            tensor = case.telemetry["tensor_active_pct"]
            rest = np.setdiff1d(np.arange(case.ranks), ranks)
            gain = np.nanmean(tensor[ranks][:, during]) / np.nanmean(tensor[ranks][:, before])
            gain_rest = np.nanmean(tensor[rest][:, during]) / np.nanmean(tensor[rest][:, before])
            assert gain > gain_rest
            return
    raise AssertionError("no isolated hot expert among the first 64 clean seeds")
