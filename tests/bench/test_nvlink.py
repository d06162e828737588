"""nvlink: tensor parallel over NVLink inside each node, data parallel over InfiniBand across nodes. The
contract (shapes, units, counters with the NVLink keys, ground truth, one case per seed, the design) and
the physics: a degraded link shows only in its own GPU's error counters while every GPU's NVLink bytes
follow the job's pace; a slow GPU makes its node-mates wait every layer and the other nodes wait at the
DP all-reduce; healthy GPUs show only rare CRC errors."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from gpuscope.bench.workloads import Case, _common, _engine, nvlink
from gpuscope.bench.workloads._common import rng_for
from gpuscope.bench.workloads._gpu import COMPUTE, LIGHT, SPIN, XFER, electrical
from tests.bench.family_checks import (
    check_design_balance,
    check_ground_truth,
    check_same_case,
    check_shapes_and_units,
    rate,
)

FAMILY = nvlink.FAMILY
SEEDS = range(32)


@pytest.fixture(scope="module")
def cases() -> Iterator[dict[int, Case]]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", 20_000)
        yield {seed: nvlink.generate(seed) for seed in SEEDS}


@pytest.mark.parametrize("seed", range(16))
def test_contract(cases: dict[int, Case], seed: int) -> None:
    check_shapes_and_units(cases[seed], FAMILY, seed, nvlink=True)
    check_ground_truth(cases[seed], FAMILY)
    assert cases[seed].gpus_per_node == 8


def test_same_seed_same_case(cases: dict[int, Case]) -> None:
    check_design_balance(FAMILY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_engine, "MAX_RANK_SAMPLES", 20_000)
        check_same_case(cases[1], nvlink.generate(1))


def _window(case: Case) -> np.ndarray:
    """Counter increments (T-1) inside the fault, two samples past its onset."""
    (fault,) = case.faults
    t0, t1 = case.times[:-1], case.times[1:]
    return (t0 >= fault.onset_s + case.sample_s) & (t1 <= fault.end_s)


def _increase(counter: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Per row, what a cumulative counter gained over the intervals `where` (dropped samples bridged)."""
    filled = np.array(
        [np.interp(np.arange(row.size), np.flatnonzero(~np.isnan(row)), row[~np.isnan(row)]) for row in counter]
    )
    return np.diff(filled, axis=1)[:, where].sum(axis=1)


def test_degraded_link_shows_on_its_gpu_alone(cases: dict[int, Case]) -> None:
    seen = 0
    for case in cases.values():
        if not case.faults or case.faults[0].kind != "nvlink":
            continue
        seen += 1
        (fault,) = case.faults
        assert fault.gpu is not None and fault.localisable
        culprit = fault.node * case.gpus_per_node + fault.gpu
        during = _window(case)
        tel = case.telemetry
        errors = _increase(tel["nvlink_replay_errors"], during) + _increase(tel["nvlink_recovery_errors"], during)
        assert errors[culprit] > 10 * max(1.0, np.delete(errors, culprit).max())
        whole = np.ones(len(case.times) - 1, dtype=bool)
        assert (
            _increase(tel["nvlink_crc_errors"], during)[culprit]
            > np.delete(_increase(tel["nvlink_crc_errors"], whole), culprit).max()
        )
        # NVLink bytes: the same on every GPU (the TP all-reduces), slower by the job's slowdown
        sent = rate(tel["nvlink_tx_bytes"], case.sample_s)
        steady = np.isfinite(case.step_s[1:]) & np.isfinite(case.step_s[:-1])
        per_gpu = np.nanmedian(sent[:, steady], axis=1)
        assert per_gpu.max() < 1.01 * per_gpu.min()
        t1 = case.times[1:]
        before = steady & (t1 < fault.onset_s) & (t1 > fault.onset_s - 1800)
        if before.sum() >= 5:
            slower = np.nanmean(sent[:, during & steady]) / np.nanmean(sent[:, before])
            assert slower == pytest.approx(1 / (1 + fault.true_slowdown), abs=0.05)
    assert seen >= 5


def test_healthy_links_show_only_rare_errors(cases: dict[int, Case]) -> None:
    for seed, case in cases.items():
        if _common.design(FAMILY, seed) is not None:
            continue
        tel = case.telemetry
        whole = np.ones(len(case.times) - 1, dtype=bool)
        for key in ("nvlink_replay_errors", "nvlink_crc_errors"):
            assert _increase(tel[key], whole).max() < 1000, key
        assert _increase(tel["nvlink_recovery_errors"], whole).max() <= 1
        assert _increase(tel["nvlink_crc_errors"], whole).max() > 0  # the decoy is there


@pytest.mark.parametrize("seed", range(4))
def test_slow_gpu_makes_its_node_wait_every_layer(seed: int) -> None:
    tp, fleet = nvlink.draw(rng_for(FAMILY, seed))
    clean = nvlink.step(tp, electrical(fleet), fleet)
    g = tp.gpn
    for kind in ("power_cap", "gpu_degraded", "nvlink"):
        slow, _ = nvlink.fault_state(tp, fleet, kind, (0, 3), 0.5, "replay")
        assert slow.S > clean.S
        # segment 0: the micro-steps; its length on each rank, then the DP wait (segment 1)
        length = np.diff(slow.bounds, axis=0) * slow.S
        length0 = np.diff(clean.bounds, axis=0) * clean.S
        mates, others = np.arange(g) != 3, np.arange(g, tp.ranks)
        assert np.all(length[0, :g] > length0[0, :g])  # node 0's micro-steps are longer
        assert np.allclose(length[0, others], length0[0, others], rtol=1e-6)  # the other nodes' are not
        assert np.all(length[1, others] > length0[1, others])  # they wait at the DP all-reduce
        if kind == "nvlink":  # every GPU of node 0 in the transfer longer, alike
            share = slow.comp[0, :g, XFER] * length[0, :g]
            assert np.all(share > clean.comp[0, :g, XFER] * length0[0, :g]) and np.ptp(share) < 1e-9
        else:  # the culprit computes longer, its node-mates spin at the TP all-reduce
            assert np.all(slow.comp[0, :g][mates, SPIN] > clean.comp[0, :g][mates, SPIN])
            busy = slow.comp[0, 3, COMPUTE] + slow.comp[0, 3, LIGHT]  # computing, or stalled on memory
            assert busy * length[0, 3] > clean.comp[0, 3, COMPUTE] * length0[0, 3]
