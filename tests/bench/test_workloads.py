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
)

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
