"""What every workload family promises of one case (shapes, units, counters, ground truth), for the tests
of the held-out families neighbour, nvlink and elastic."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.bench.workloads import (
    FAULT_KINDS,
    GPU_KEYS,
    NVLINK_KEYS,
    PORT_KEYS,
    TARGET_SLOWDOWNS,
    Case,
    _common,
)

GPU_KINDS = ("thermal", "power_cap", "gpu_degraded", "nvlink")  # faults that name a GPU


def check_shapes_and_units(case: Case, family: str, seed: int, nvlink: bool = False, max_nan: float = 0.2) -> None:
    T = len(case.times)
    tel = case.telemetry
    assert case.family == family and case.seed == seed and case.synchronous
    assert 3600 <= case.duration_s <= 10800 and 5 <= case.sample_s <= 30
    assert np.allclose(case.times, case.sample_s * (1 + np.arange(T)))
    assert set(tel) == set(GPU_KEYS) | set(PORT_KEYS) | (set(NVLINK_KEYS) if nvlink else set())
    for key in GPU_KEYS + (NVLINK_KEYS if nvlink else ()):
        assert tel[key].shape == (case.ranks, T), key
    for key in PORT_KEYS:
        assert tel[key].shape == (case.ports, T), key
    assert case.ports == case.nodes and np.array_equal(case.port_node, np.arange(case.nodes))
    assert np.all(case.port_gpu == -1)
    assert case.step_s.shape == case.clean_step_s.shape == (T,)
    for key in ("xmit_bytes", "xmit_wait", *(NVLINK_KEYS if nvlink else ())):
        for row in tel[key]:
            seen = row[~np.isnan(row)]
            assert np.all(np.diff(seen) >= 0) and np.all(seen == np.round(seen)), key
    for key in ("util_pct", "sm_active_pct", "tensor_active_pct"):
        assert np.nanmin(tel[key]) >= 0 and np.nanmax(tel[key]) <= 100, key
    both = np.isfinite(tel["tensor_active_pct"]) & np.isfinite(tel["sm_active_pct"])
    assert np.all(tel["tensor_active_pct"][both] <= tel["sm_active_pct"][both] + 1e-9)
    assert np.nanmin(tel["power_w"]) > 20 and np.nanmax(tel["power_w"]) < 750
    assert np.nanmin(tel["sm_clock_mhz"]) >= 100 and np.nanmax(tel["sm_clock_mhz"]) <= 1980
    assert np.nanmin(tel["temp_c"]) > 10 and np.nanmax(tel["temp_c"]) < 100
    bits = tel["clock_event_reasons"][~np.isnan(tel["clock_event_reasons"])]
    assert np.all(bits == np.round(bits)) and np.all((bits.astype(int) & ~0x6D) == 0)  # 0x1 0x4 0x8 0x20 0x40
    assert set(np.unique(tel["rate_gbps"][~np.isnan(tel["rate_gbps"])])) <= {100.0, 200.0, 400.0}
    for key, arr in tel.items():  # dropped samples now and then, never most of them
        assert 0 < np.isnan(arr).mean() < max_nan, key
    steps = case.step_s[np.isfinite(case.step_s)]
    assert len(steps) > 0.5 * T and np.all(steps > 0)


def check_ground_truth(case: Case, family: str) -> None:
    """The seed's design, and a stated slowdown that is the model's: step time over the fault-free step
    time inside the window, exactly 1 outside it."""
    target = _common.design(family, case.seed)
    ratio = case.step_s / case.clean_step_s
    if target is None:
        assert case.faults == []
        assert np.nanmax(np.abs(ratio - 1)) < 1e-9
        return
    (fault,) = case.faults
    assert fault.kind in FAULT_KINDS and fault.target_slowdown == target
    assert fault.onset_s >= 600 and 180 <= fault.end_s - fault.onset_s <= 2400 and fault.end_s <= case.duration_s
    if fault.kind == "fabric":
        assert fault.node == -1 and fault.gpu is None and fault.port is None and fault.aggressor
    else:
        assert 0 <= fault.node < case.nodes and fault.aggressor is None
    if fault.kind in GPU_KINDS:
        assert fault.gpu is not None and 0 <= fault.gpu < case.gpus_per_node and fault.port is None
    elif fault.kind == "slow_nic":
        assert fault.gpu is None and fault.port is not None and case.port_node[fault.port] == fault.node
    else:
        assert fault.gpu is None and fault.port is None
    assert abs(fault.true_slowdown / target - 1) < 0.3
    starts = case.times - case.sample_s
    inside = (starts >= fault.onset_s) & (case.times <= fault.end_s) & np.isfinite(ratio)
    assert inside.sum() >= 3
    assert np.mean(ratio[inside]) - 1 == pytest.approx(fault.true_slowdown, rel=0.01)
    outside = (case.times < fault.onset_s) | (starts >= fault.end_s)
    assert np.nanmax(np.abs(ratio[outside] - 1)) < 1e-9


def check_same_case(first: Case, again: Case) -> None:
    assert set(first.telemetry) == set(again.telemetry)
    for key, arr in first.telemetry.items():
        assert np.array_equal(arr, again.telemetry[key], equal_nan=True), key
    assert np.array_equal(first.step_s, again.step_s, equal_nan=True)
    assert first.faults == again.faults and first.decoys == again.decoys and first.params == again.params


def check_design_balance(family: str) -> None:
    """Per 16 consecutive seeds: 4 clean, 3 at each target slowdown."""
    for block in range(3):
        targets = [_common.design(family, 16 * block + i) for i in range(16)]
        assert targets.count(None) == 4
        assert all(targets.count(t) == 3 for t in TARGET_SLOWDOWNS)


def rate(counter: np.ndarray, sample_s: float) -> np.ndarray:
    """Per-second increments of a cumulative counter (rows x T-1), NaN across dropped samples."""
    return np.diff(counter, axis=-1) / sample_s
