"""serving: independent inference replicas. Shapes, units and counters; one case per seed; every seed clean
and asynchronous whatever the design, with the strongest decoy sized like the design's target; and the
physics: a replica's GPUs move together while replicas on other nodes do not, load drives activity, a
restarting replica drops to deep idle while the others take its traffic."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.bench.workloads import GPU_KEYS, NVLINK_KEYS, PORT_KEYS, TARGET_SLOWDOWNS, Case, _common, serving

FAMILY = serving.FAMILY


@pytest.fixture(scope="module")
def cases() -> dict[int, Case]:
    return {seed: serving.generate(seed) for seed in range(24)}


def _decoy(case: Case, kind: str) -> dict[str, float] | None:
    records = case.params["decoys"]
    assert isinstance(records, list)
    return next((d for d in records if d["kind"] == kind), None)


@pytest.mark.parametrize("seed", range(8))
def test_shapes_units_and_counters(cases: dict[int, Case], seed: int) -> None:
    case = cases[seed]
    T = len(case.times)
    assert case.family == FAMILY and case.seed == seed
    assert 3600 <= case.duration_s <= 10800 and 5 <= case.sample_s <= 30
    assert np.allclose(case.times, case.sample_s * (1 + np.arange(T)))
    assert 2 <= case.nodes <= 32 and case.ports == case.nodes and np.all(case.port_gpu == -1)
    assert set(case.telemetry) == set(GPU_KEYS) | set(PORT_KEYS) | set(NVLINK_KEYS)
    for key in (*GPU_KEYS, *NVLINK_KEYS):
        assert case.telemetry[key].shape == (case.ranks, T), key
    for key in PORT_KEYS:
        assert case.telemetry[key].shape == (case.ports, T), key
    tel = case.telemetry
    for key in ("xmit_bytes", "xmit_wait", *NVLINK_KEYS):
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
    bits = tel["clock_event_reasons"][~np.isnan(tel["clock_event_reasons"])]
    assert np.all(bits == np.round(bits)) and np.all((bits.astype(int) & ~0x25) == 0)  # idle, power cap, SW thermal
    assert set(np.unique(tel["rate_gbps"][~np.isnan(tel["rate_gbps"])])) <= {200.0, 400.0}
    for key, arr in tel.items():
        assert np.isnan(arr).mean() < 0.2, key
    assert any(np.isnan(arr).any() for arr in tel.values())  # dropped samples, now and then
    latency = case.step_s[np.isfinite(case.step_s)]
    assert len(latency) > 0.9 * T and np.all(latency > 0)


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    for seed in (0, 3):
        again = serving.generate(seed)
        for key, arr in cases[seed].telemetry.items():
            assert np.array_equal(arr, again.telemetry[key], equal_nan=True), key
        assert np.array_equal(cases[seed].step_s, again.step_s, equal_nan=True)
        assert cases[seed].decoys == again.decoys


def test_every_seed_is_clean_and_the_design_sizes_the_decoys(cases: dict[int, Case]) -> None:
    """No seed has a fault (nobody waits for a slow replica), whatever the design says; a seed the design
    makes faulty gets a replica slowed like its target, named in the decoys."""
    for block in range(2):
        targets = [_common.design(FAMILY, 16 * block + i) for i in range(16)]
        assert targets.count(None) == 4 and all(targets.count(t) == 3 for t in TARGET_SLOWDOWNS)
    for seed, case in cases.items():
        assert case.faults == [] and not case.synchronous
        assert np.array_equal(case.step_s, case.clean_step_s, equal_nan=True)
        target = _common.design(FAMILY, seed)
        if target is None:
            continue
        slowed = _decoy(case, "slow_clock") or _decoy(case, "memory_stalls")
        assert slowed is not None, seed
        assert abs(slowed["slowdown"] / target - 1) < 0.25
        assert any(text.startswith(("slow_clock", "memory_stalls")) for text in case.decoys)


def test_replicas_move_alone(cases: dict[int, Case]) -> None:
    """The GPUs of one tensor-parallel replica are in lock-step (their tensor activity moves together);
    replicas on different nodes follow their own traffic (their fluctuations barely correlate)."""
    checked = 0
    for case in cases.values():
        tp = int(case.params["tp"])  # type: ignore[call-overload]
        if tp < 2 or case.nodes < 3:
            continue
        tensor = case.telemetry["tensor_active_pct"]
        ok = np.all(np.isfinite(tensor), axis=0)
        wiggle = np.diff(tensor[:, ok], axis=1)  # fluctuations, without the job's slow trend
        corr = np.corrcoef(wiggle)
        rep = np.arange(case.ranks) // tp
        node = np.arange(case.ranks) // case.gpus_per_node
        same = corr[(rep[:, None] == rep[None, :]) & ~np.eye(case.ranks, dtype=bool)]
        apart = corr[node[:, None] != node[None, :]]
        assert np.mean(same) > 0.8 and abs(np.mean(apart)) < 0.15
        checked += 1
    assert checked >= 2


def test_load_drives_activity(cases: dict[int, Case]) -> None:
    """A replica taking about twice its share reads more power and tensor activity than it did before."""
    checked = 0
    for case in cases.values():
        hot = _decoy(case, "hot_replica")
        if hot is None or hot["end"] - hot["start"] < 300:
            continue
        tp = int(case.params["tp"])  # type: ignore[call-overload]
        ranks = np.arange(hot["replica"] * tp, (hot["replica"] + 1) * tp)
        during = (case.times > hot["start"] + 60) & (case.times < hot["end"])
        before = (case.times < hot["start"]) & (case.times > hot["start"] - 1200) & (case.times > 900)
        if before.sum() < 5:
            continue
        for key in ("power_w", "tensor_active_pct"):
            arr = case.telemetry[key]
            assert np.nanmean(arr[ranks][:, during]) > np.nanmean(arr[ranks][:, before]), key
        checked += 1
    assert checked >= 2


def test_restart_drops_to_deep_idle(cases: dict[int, Case]) -> None:
    """A restarting replica is first down (deep idle: low power, no utilisation, idle reason, low clock),
    and nothing else in the job waits for it."""
    checked = 0
    for case in cases.values():
        restart = _decoy(case, "restart")
        if restart is None:
            continue
        tp = int(case.params["tp"])  # type: ignore[call-overload]
        ranks = np.arange(restart["replica"] * tp, (restart["replica"] + 1) * tp)
        down = (case.times - case.sample_s >= restart["start"]) & (case.times < restart["start"] + 10)
        if not down.any():
            continue
        tel = case.telemetry
        assert np.nanmax(tel["util_pct"][ranks][:, down]) <= 5
        assert np.nanmax(tel["power_w"][ranks][:, down]) < 130
        bits = np.nan_to_num(tel["clock_event_reasons"][ranks][:, down]).astype(int)
        assert np.all(bits & 0x1 | (np.isnan(tel["clock_event_reasons"][ranks][:, down])))
        others = np.setdiff1d(np.arange(case.ranks), ranks)
        assert np.nanmean(tel["power_w"][others][:, down]) > np.nanmean(tel["power_w"][ranks][:, down])
        checked += 1
    assert checked >= 1
