"""mixed_models: data parallel over two GPU models. Shapes, units and counters; one case per seed; the design's
balance and the fault's stated slowdown; the faster model waiting every step by design; a GPU stalled on
memory at its normal clock; and a slowed GPU costing the job less on the faster model (its slack)."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.bench.workloads import GPU_KEYS, PORT_KEYS, TARGET_SLOWDOWNS, Case, _common, mixed_models
from gpuscope.bench.workloads._gpu import IDLE, SPIN

FAMILY = mixed_models.FAMILY
SEEDS = range(12)


@pytest.fixture(scope="module")
def cases() -> dict[int, Case]:
    return {seed: mixed_models.generate(seed) for seed in range(64)}


def _fault_seed(cases: dict[int, Case], kind: str) -> Case:
    for case in cases.values():
        if case.faults and case.faults[0].kind == kind and case.faults[0].target_slowdown >= 0.2:
            return case
    raise AssertionError(f"no {kind} among the first 64 seeds")


@pytest.mark.parametrize("seed", SEEDS)
def test_shapes_units_and_counters(cases: dict[int, Case], seed: int) -> None:
    case = cases[seed]
    T = len(case.times)
    assert case.family == FAMILY and case.seed == seed and case.synchronous
    assert 3600 <= case.duration_s <= 10800 and 5 <= case.sample_s <= 30
    assert np.allclose(case.times, case.sample_s * (1 + np.arange(T)))
    assert 2 <= case.nodes <= 32 and case.ports == case.nodes
    for key in GPU_KEYS:
        assert case.telemetry[key].shape == (case.ranks, T), key
    for key in PORT_KEYS:
        assert case.telemetry[key].shape == (case.ports, T), key
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
    for key, arr in tel.items():
        assert 0 < np.isnan(arr).mean() < 0.2, key
    models = case.params["node_model"]
    assert isinstance(models, list) and len(set(models)) == 2


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    for seed in (2, 5):
        again = mixed_models.generate(seed)
        for key, arr in cases[seed].telemetry.items():
            assert np.array_equal(arr, again.telemetry[key], equal_nan=True), key
        assert cases[seed].faults == again.faults and cases[seed].decoys == again.decoys


def test_design_and_ground_truth(cases: dict[int, Case]) -> None:
    for block in range(3):
        targets = [_common.design(FAMILY, 16 * block + i) for i in range(16)]
        assert targets.count(None) == 4 and all(targets.count(t) == 3 for t in TARGET_SLOWDOWNS)
    kinds = set()
    for seed, case in cases.items():
        target = _common.design(FAMILY, seed)
        ratio = case.step_s / case.clean_step_s
        if target is None:
            assert case.faults == [] and np.nanmax(np.abs(ratio - 1)) < 1e-9
            continue
        (fault,) = case.faults
        kinds.add(fault.kind)
        assert fault.target_slowdown == target and abs(fault.true_slowdown / target - 1) < 0.3
        assert fault.onset_s >= 600 and 180 <= fault.end_s - fault.onset_s <= 2400
        if fault.kind in ("thermal", "power_cap", "gpu_degraded"):
            assert fault.gpu is not None and fault.port is None
        starts = case.times - case.sample_s
        inside = (starts >= fault.onset_s) & (case.times <= fault.end_s) & np.isfinite(ratio)
        assert np.mean(ratio[inside]) - 1 == pytest.approx(fault.true_slowdown, rel=0.01)
    assert kinds == {"thermal", "power_cap", "slow_nic", "slow_host", "gpu_degraded"}


def test_faster_model_waits_every_step(cases: dict[int, Case]) -> None:
    """On clean seeds the faster model's GPUs wait at every all-reduce: with spinning waits their SM
    activity reads lower than the slower model's, with idle waits their utilisation does."""
    checked = 0
    for case in cases.values():
        if case.faults:
            continue
        share = case.params["wait_share_by_model"]
        assert isinstance(share, dict)
        fast = max(share, key=lambda name: share[name])
        slow = min(share, key=lambda name: share[name])
        if share[fast] - share[slow] < 0.03:
            continue
        node_model = np.array(case.params["node_model"])
        rank_model = np.repeat(node_model, case.gpus_per_node)
        steady = case.times > 600
        key = "sm_active_pct" if case.params["wait"] == "spin" else "util_pct"
        tel = case.telemetry[key][:, steady]
        assert np.nanmean(tel[rank_model == fast]) < np.nanmean(tel[rank_model == slow]) - 1
        checked += 1
    assert checked >= 3


def test_memory_stalled_gpu_keeps_its_clock(cases: dict[int, Case]) -> None:
    """gpu_degraded: no lower clock, no throttle reason; its SMs stay occupied while its peers wait (SM
    activity above theirs), and its tensor activity does not stand out (no extra tensor-pipe cycles)."""
    case = _fault_seed(cases, "gpu_degraded")
    (fault,) = case.faults
    assert fault.gpu is not None
    rank = fault.node * case.gpus_per_node + fault.gpu
    tel = case.telemetry
    during = (case.times > fault.onset_s + 2 * case.sample_s) & (case.times < fault.end_s)
    before = (case.times < fault.onset_s) & (case.times > 600)
    rank_model = np.repeat(np.array(case.params["node_model"]), case.gpus_per_node)
    peers = np.array(
        [r for r in range(case.ranks) if rank_model[r] == rank_model[rank] and r // case.gpus_per_node != fault.node]
    )
    assert len(peers)
    assert np.nanmean(tel["sm_clock_mhz"][rank, during]) >= np.nanmean(tel["sm_clock_mhz"][rank, before]) - 15
    assert np.all((np.nan_to_num(tel["clock_event_reasons"][rank, during]).astype(int) & 0x6C) == 0)
    assert np.nanmean(tel["sm_active_pct"][rank, during]) > np.nanmean(tel["sm_active_pct"][peers][:, during]) + 3
    ten_rank = np.nanmean(tel["tensor_active_pct"][rank, during])
    assert ten_rank == pytest.approx(np.nanmean(tel["tensor_active_pct"][peers][:, during]), rel=0.2)


@pytest.mark.parametrize("seed", [s for s in range(32) if _common.design(FAMILY, s) is None][:4])
def test_faster_model_absorbs_a_slow_gpu(seed: int) -> None:
    """The same thermal fault costs the job less on the faster model: part of it only eats that GPU's wait."""
    rng = _common.rng_for(FAMILY, seed)
    dp, mf, _ = mixed_models.draw(rng)
    elec = mixed_models.electrical_mixed(mf)
    clean = mixed_models.step(dp, elec, mf.fleet).S
    waits = clean - clean_fixed(dp, mf) - dp.c0 * mf.fleet.het / elec.speed - dp.h0
    fast, slow = int(np.argmax(waits)), int(np.argmin(waits))
    for x in (0.1, 0.3):
        cost = [
            mixed_models.fault_state(dp, mf, "thermal", (r // dp.gpn, r % dp.gpn), x, "")[0].S / clean - 1
            for r in (fast, slow)
        ]
        assert cost[0] < cost[1]
    assert dp.wait_act in (SPIN, IDLE)


def clean_fixed(dp: mixed_models.DP, mf: mixed_models.MixedFleet) -> float:
    return mixed_models.step(dp, mixed_models.electrical_mixed(mf), mf.fleet).fixed
