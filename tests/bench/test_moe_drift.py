"""moe_drift: mixture of experts with expert parallelism whose hot experts drift. The case keeps the
contract (shapes, units, counters, ground truth, determinism), and the model keeps its physics: tokens
are conserved, the step follows the hottest rank, the hot rank is the one computing most, a fault on a
hot rank costs more than the same fault on a cold one, a degraded GPU is slow at normal clocks."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gpuscope.bench.workloads import GPU_KEYS, PORT_KEYS, TARGET_SLOWDOWNS, Case, _common, moe_drift
from gpuscope.bench.workloads._gpu import COMPUTE, SPIN, Fleet, electrical
from gpuscope.bench.workloads._regimes import regime_edges

FAMILY = moe_drift.FAMILY
KINDS = {"thermal", "power_cap", "gpu_degraded", "slow_nic", "slow_host"}
CLEAN = [s for s in range(16) if _common.design(FAMILY, s) is None]
FAULTY = [s for s in range(16) if _common.design(FAMILY, s) is not None]


@pytest.fixture(scope="module")
def cases() -> Iterator[dict[int, Case]]:
    yield {seed: moe_drift.generate(seed) for seed in range(16)}


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
    targets = [_common.design(FAMILY, s) for s in range(16)]
    assert targets.count(None) == 4 and all(targets.count(t) == 3 for t in TARGET_SLOWDOWNS)
    for seed, case in cases.items():
        ratio = case.step_s / case.clean_step_s
        target = targets[seed]
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
        starts = case.times - case.sample_s
        inside = (starts >= fault.onset_s) & (case.times <= fault.end_s) & np.isfinite(ratio)
        assert np.mean(ratio[inside]) - 1 == pytest.approx(fault.true_slowdown, rel=0.01)
        outside = (case.times < fault.onset_s) | (starts >= fault.end_s)
        assert np.nanmax(np.abs(ratio[outside] - 1)) < 1e-9


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    seed = FAULTY[0]
    again, first = moe_drift.generate(seed), cases[seed]
    for key, arr in first.telemetry.items():
        assert np.array_equal(arr, again.telemetry[key], equal_nan=True), key
    assert np.array_equal(first.step_s, again.step_s, equal_nan=True)
    assert first.faults == again.faults and first.decoys == again.decoys


def _model(seed: int, duration: float = 7200.0) -> tuple[moe_drift.Moe, Fleet, np.ndarray]:
    rng = _common.rng_for("test", seed)
    m, fleet, _ = moe_drift.draw(rng)
    lam, _, _ = moe_drift.drift_loads(rng, m, regime_edges(duration, 10.0, 90.0), duration)
    return m, fleet, lam


@pytest.mark.parametrize("seed", range(4))
def test_loads_conserved_and_drifting(seed: int) -> None:
    """Tokens move between the ranks of a group, never in or out; the hottest rank changes over the job."""
    m, _, lam = _model(seed)
    groups = lam.reshape(*lam.shape[:2], m.groups, -1)
    assert np.allclose(groups.mean(axis=-1), 1.0)
    hottest = lam.mean(axis=1).argmax(axis=1)
    assert len(set(hottest.tolist())) >= 2


def test_step_follows_the_hottest_rank(cases: dict[int, Case]) -> None:
    """Where the job is dropless, the regimes' step times rise and fall with the hottest rank's load."""
    seen = 0
    for case in cases.values():
        if case.params["capacity_factor"] is not None:
            continue
        step = np.array(case.params["regime_step_s"])
        hot = np.array(case.params["hot_load"])
        assert np.corrcoef(step, hot)[0, 1] > 0.5
        seen += 1
    assert seen >= 3


@pytest.mark.parametrize("seed", CLEAN[:2])
def test_hot_rank_computes_most(cases: dict[int, Case], seed: int) -> None:
    """In each regime the rank whose experts get the most tokens reads more tensor activity than the
    median rank (it computes while the others spin)."""
    case = cases[seed]
    starts = np.array(case.params["regime_starts"])
    hot = np.array(case.params["hot_rank"])
    tensor = case.telemetry["tensor_active_pct"]
    regime = np.searchsorted(starts, case.times - case.sample_s / 2, side="right") - 1
    above = []
    for k in range(len(starts)):
        cols = (regime == k) & np.isfinite(case.step_s)
        if cols.sum() >= 2 and np.isfinite(tensor[:, cols]).any(axis=1).all():
            per_rank = np.nanmean(tensor[:, cols], axis=1)
            above.append(per_rank[hot[k]] > np.median(per_rank))
    assert np.mean(above) > 0.8


@pytest.mark.parametrize("seed", range(4))
def test_fault_on_a_hot_rank_costs_more(seed: int) -> None:
    """The same thermal fault costs the job more on the hottest rank than on the coldest: a cold rank's
    experts had slack that absorbs part of it. Every rank's step adds up, and the waits are spin."""
    m, fleet, lam = _model(seed)
    lam = lam[:6]
    clean = moe_drift.evaluate(m, fleet, electrical(fleet), lam)
    load = lam.mean(axis=(0, 1))
    cost = {}
    for name, rank in (("hot", int(np.argmax(load))), ("cold", int(np.argmin(load)))):
        st = moe_drift.evaluate(m, fleet, electrical(fleet, "thermal", rank, 0.3), lam)
        cost[name] = float(np.mean(st.S / clean.S) - 1)
    assert cost["hot"] > cost["cold"] > 0
    train = (clean.Tf + clean.Tb)[:, m.group_of_rank()]
    assert np.allclose((clean.secs_f + clean.secs_b).sum(axis=2), train)
    assert np.all(clean.secs_f[:, :, SPIN].sum(axis=0) > 0)


def test_degraded_gpu_is_slow_at_normal_clocks(cases: dict[int, Case]) -> None:
    """gpu_degraded: the culprit reads no throttle reason and no lower clock than its peers, yet its SMs
    are busy longer (it computes while they spin)."""
    for case in cases.values():
        if not case.faults or case.faults[0].kind != "gpu_degraded" or case.faults[0].true_slowdown < 0.1:
            continue
        fault = case.faults[0]
        assert fault.gpu is not None
        rank = fault.node * case.gpus_per_node + fault.gpu
        during = _during(case)
        peers = np.array([r for r in range(case.ranks) if r // case.gpus_per_node != fault.node])
        tel = case.telemetry
        bits = tel["clock_event_reasons"][rank, during]
        assert np.all((bits[~np.isnan(bits)].astype(int) & 0x6C) == 0)
        assert np.nanmean(tel["sm_clock_mhz"][rank, during]) >= np.nanmean(tel["sm_clock_mhz"][peers][:, during]) - 15
        assert np.nanmean(tel["sm_active_pct"][rank, during]) > np.nanmean(tel["sm_active_pct"][peers][:, during])
        return
    pytest.skip("no gpu_degraded seed of 0.1 or more among the first 16")


def test_slow_nic_shows_on_its_port() -> None:
    """A credit-stalled port waits for credits more than any other port; a downtrained link reports its
    rate. Both slow the job."""
    for seed in range(64):
        if _common.design(FAMILY, seed) not in (0.2, 0.5):
            continue
        case = moe_drift.generate(seed)
        if case.faults[0].kind != "slow_nic":
            continue
        fault = case.faults[0]
        assert fault.port is not None
        during = _during(case)
        if "trained" in fault.detail:
            rate = case.telemetry["rate_gbps"]
            assert np.nanmax(rate[fault.port, during]) < np.nanmin(np.delete(rate, fault.port, axis=0)[:, during])
        else:
            wait = np.nanmean(np.diff(case.telemetry["xmit_wait"], axis=1)[:, during[1:]], axis=1)
            assert int(np.argmax(wait)) == fault.port
        return
    raise AssertionError("no slow_nic seed of 0.2 or more among the first 64")


def test_every_rank_spins_while_it_waits(cases: dict[int, Case]) -> None:
    """The all-to-alls are NCCL kernels: a clean job's GPUs read ~100% utilisation all through its steps."""
    case = cases[CLEAN[0]]
    steady = np.isfinite(case.step_s)
    assert np.nanmedian(case.telemetry["util_pct"][:, steady]) >= 99
    m, fleet, lam = _model(CLEAN[0])
    st = moe_drift.evaluate(m, fleet, electrical(fleet), lam[:3])
    assert np.all(st.secs_f[:, :, COMPUTE] > 0)
