"""elastic: data parallel under torchrun restarts. The contract (shapes, units, counters, ground truth, one
case per seed, the design) and the physics: a restart stops every rank and every port, its warm-up is in
the clean step time, a removed node reports nothing or idles while the others go on, faults sit on ranks
that stay in the job."""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import numpy as np
import pytest

from gpuscope.bench.workloads import GPU_KEYS, PORT_KEYS, Case, _engine, elastic
from gpuscope.bench.workloads._gpu import GPU_IDLE_BIT
from tests.bench.family_checks import (
    check_design_balance,
    check_ground_truth,
    check_same_case,
    check_shapes_and_units,
    rate,
)

FAMILY = elastic.FAMILY
SEEDS = range(32)


@pytest.fixture(scope="module")
def cases() -> Iterator[dict[int, Case]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", 20_000)
        yield {seed: elastic.generate(seed) for seed in SEEDS}


def _restarts(case: Case) -> list[tuple[float, float, str, int, float]]:
    restarts = case.params["restarts"]
    assert isinstance(restarts, list)
    return restarts


@pytest.mark.parametrize("seed", range(16))
def test_contract(cases: dict[int, Case], seed: int) -> None:
    case = cases[seed]
    check_shapes_and_units(case, FAMILY, seed, max_nan=0.3)  # a node down for the rest of the job
    check_ground_truth(case, FAMILY)
    assert len(_restarts(case)) >= 1 and "elastic_restart" in case.decoys


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    check_design_balance(FAMILY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", 20_000)
        check_same_case(cases[0], elastic.generate(0))


def test_restart_stops_every_rank_and_port(cases: dict[int, Case]) -> None:
    seen = 0
    for case in cases.values():
        t0, t1 = case.times - case.sample_s, case.times
        steady = np.isfinite(case.step_s)
        tensor = case.telemetry["tensor_active_pct"]
        sent = rate(case.telemetry["xmit_bytes"], case.sample_s)
        for start, resume, *_ in _restarts(case):
            down = (t0 >= start) & (t1 <= resume)
            if not down.any():
                continue
            seen += 1
            assert np.all(np.isnan(case.step_s[down]))
            assert np.nanmean(tensor[:, down]) < 0.3 * np.nanmean(tensor[:, steady])
            assert np.nanmax(sent[:, down[1:]]) < 0.05 * np.nanmedian(sent[:, steady[1:]])
    assert seen >= 10


def test_warm_up_is_in_the_clean_step_time(cases: dict[int, Case]) -> None:
    seen = 0
    for case in cases.values():
        t0, t1 = case.times - case.sample_s, case.times
        typical = np.nanmedian(case.clean_step_s)
        for _, resume, *_ in _restarts(case):
            first_minute = (t0 >= resume) & (t1 <= resume + 60) & np.isfinite(case.clean_step_s)
            if first_minute.any():
                seen += 1
                assert np.all(case.clean_step_s[first_minute] > 1.1 * typical)
    assert seen >= 10


def test_removed_node_reports_nothing_or_idles(cases: dict[int, Case]) -> None:
    modes = set()
    for case in cases.values():
        if case.params["removed"] is None:
            continue
        node, start, end, mode = cast(tuple[int, float, float, str], case.params["removed"])
        modes.add(mode)
        g = case.gpus_per_node
        gone = (case.times - case.sample_s > start) & (case.times <= end)
        ranks = slice(node * g, (node + 1) * g)
        tel = case.telemetry
        sent = rate(tel["xmit_bytes"], case.sample_s)[node, gone[1:]]
        assert np.nanmax(sent, initial=0.0) < 1e7  # none of the job's traffic through its NIC
        if mode == "nan":
            assert all(np.all(np.isnan(tel[key][ranks, gone])) for key in GPU_KEYS)
            assert all(np.all(np.isnan(tel[key][node, gone])) for key in PORT_KEYS)
        else:
            assert np.all(tel["util_pct"][ranks, gone][np.isfinite(tel["util_pct"][ranks, gone])] == 0)
            reasons = tel["clock_event_reasons"][ranks, gone]
            assert np.all(reasons[np.isfinite(reasons)] == GPU_IDLE_BIT)
            assert np.nanmax(tel["power_w"][ranks, gone]) < 100
        assert np.nanmean(tel["util_pct"][np.arange(case.ranks) // g != node][:, gone]) > 50  # the others go on
        back = (case.times > end + 900) & np.isfinite(case.step_s)
        if back.any():
            assert np.nanmean(tel["util_pct"][ranks, back]) > 50
    assert modes == {"nan", "idle"}


def test_faults_sit_on_ranks_that_stay() -> None:
    for seed in range(48):
        case = elastic.generate(seed)
        removed = cast(tuple[int, float, float, str] | None, case.params["removed"])
        if case.faults and removed is not None:
            assert case.faults[0].node != removed[0]
