"""neighbour: a data-parallel job slowed by another job's traffic through shared switches or NICs. The
contract (shapes, units, counters, ground truth, one case per seed, the design), half the faulty seeds
the neighbour's doing, and the physics: a heavy phase slows every victim rank alike while the congested
ports wait for credits; light traffic only makes ports wait; a shared NIC carries the aggressor's bytes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
import pytest

from gpuscope.bench.workloads import Case, _common, _engine, neighbour
from tests.bench.family_checks import (
    check_design_balance,
    check_ground_truth,
    check_same_case,
    check_shapes_and_units,
    rate,
)

FAMILY = neighbour.FAMILY
SEEDS = range(32)


@pytest.fixture(scope="module")
def cases() -> Iterator[dict[int, Case]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", 20_000)
        yield {seed: neighbour.generate(seed) for seed in SEEDS}


@pytest.mark.parametrize("seed", range(16))
def test_contract(cases: dict[int, Case], seed: int) -> None:
    check_shapes_and_units(cases[seed], FAMILY, seed)
    check_ground_truth(cases[seed], FAMILY)


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", 20_000)
        check_same_case(cases[3], neighbour.generate(3))


def test_design_half_fabric(cases: dict[int, Case]) -> None:
    check_design_balance(FAMILY)
    for block in range(4):
        faulty = [s for s in range(16 * block, 16 * block + 16) if _common.design(FAMILY, s) is not None]
        assert sum(neighbour.is_fabric(s) for s in faulty) == len(faulty) // 2
    for seed, case in cases.items():
        kinds = [f.kind for f in case.faults]
        if _common.design(FAMILY, seed) is None:
            assert kinds == [] and "light_neighbour_traffic" in case.decoys
        elif neighbour.is_fabric(seed):
            assert kinds == ["fabric"] and case.faults[0].aggressor == case.params["aggressor"]
        else:
            assert kinds[0] in ("thermal", "power_cap", "slow_nic", "slow_host")


def _before_and_during(case: Case, start: float, end: float) -> tuple[np.ndarray, np.ndarray]:
    """Intervals (of the T-1 counter increments) inside [start, end], and steady ones before it that no
    other neighbour episode touches."""
    t0, t1 = case.times[:-1], case.times[1:]
    episodes = case.params["episodes"]
    assert isinstance(episodes, list)
    quiet = np.ones(len(t1), dtype=bool)
    for a, b, *_ in episodes:
        quiet &= (t1 < a) | (t0 > b)
    steady = np.isfinite(case.step_s[1:]) & np.isfinite(case.step_s[:-1])
    during = (t0 >= start) & (t1 <= end) & steady
    before = (t1 < start) & (t1 > start - 2400) & quiet & steady
    return before, during


def test_heavy_phase_slows_every_rank_alike_and_congested_ports_wait(cases: dict[int, Case]) -> None:
    seen = 0
    for case in cases.values():
        if not case.faults or case.faults[0].kind != "fabric":
            continue
        (fault,) = case.faults
        before, during = _before_and_during(case, fault.onset_s, fault.end_s)
        if before.sum() < 5 or during.sum() < 5:
            continue
        seen += 1
        tel = case.telemetry
        wait = rate(tel["xmit_wait"], case.sample_s) / _engine.WAIT_TICK_HZ
        congested = np.array(case.params["congested_ports"])
        w0, w1 = np.nanmean(wait[:, before], axis=1), np.nanmean(wait[:, during], axis=1)
        assert np.all(w1[congested] > 2 * w0[congested] + 1e-3)
        others = np.setdiff1d(np.arange(case.ports), congested)
        assert np.allclose(w1[others], w0[others], rtol=0.3, atol=2e-3)
        if case.params["layout"] == "switch":  # the same bytes per step over a longer step, on every port
            sent = rate(tel["xmit_bytes"], case.sample_s)
            drop = np.nanmean(sent[:, during], axis=1) / np.nanmean(sent[:, before], axis=1)
            assert np.all(drop < 1 - 0.4 * fault.true_slowdown / (1 + fault.true_slowdown))
        # every victim rank loses tensor activity in the same proportion: nobody inside is the culprit
        tensor = tel["tensor_active_pct"][:, 1:]
        loss = np.nanmean(tensor[:, during], axis=1) / np.nanmean(tensor[:, before], axis=1)
        assert np.nanmax(loss) / np.nanmin(loss) < 1.1 and np.nanmean(loss) < 1
    assert seen >= 4


def test_light_traffic_only_makes_ports_wait(cases: dict[int, Case]) -> None:
    seen = 0
    for seed, case in cases.items():
        if _common.design(FAMILY, seed) is not None:
            continue
        episodes = case.params["episodes"]
        assert isinstance(episodes, list)
        for start, end, kind, _, level in episodes:
            assert kind == "light"
            before, during = _before_and_during(case, start, end)
            if before.sum() < 5 or during.sum() < 5 or level < 0.2:
                continue
            seen += 1
            wait = rate(case.telemetry["xmit_wait"], case.sample_s)
            worst = int(np.argmax(np.nanmean(wait[:, during], axis=1) - np.nanmean(wait[:, before], axis=1)))
            assert worst in cast(list[int], case.params["congested_ports"])
            assert np.nanmean(wait[worst, during]) > 1.5 * np.nanmean(wait[worst, before])
            clean = case.clean_step_s[1:]
            assert np.nanmean(clean[during]) / np.nanmean(clean[before]) < 1.03
    assert seen >= 3


def test_shared_nic_carries_the_aggressors_bytes(cases: dict[int, Case]) -> None:
    seen = 0
    for case in cases.values():
        if case.params["layout"] != "node":
            continue
        shared = np.array(case.params["shared_nodes"])
        others = np.setdiff1d(np.arange(case.ports), shared)
        if len(others) == 0:
            continue
        seen += 1
        sent = np.nanmedian(rate(case.telemetry["xmit_bytes"], case.sample_s), axis=1)
        assert sent[shared].min() > sent[others].max()
        assert case.gpus_per_node == 4  # the victim holds half of each server
    assert seen >= 3
