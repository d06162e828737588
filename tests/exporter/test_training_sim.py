"""The training-job simulator behaves like a synchronous data-parallel job: the step follows the slowest
rank, waiting ranks look busy to utilisation but not to tensor activity or power, each fault leaves its
own marks, and the ground truth says exactly how much slower the job was."""

from __future__ import annotations

import numpy as np
import pytest

from gpuscope.exporter.sim.training import HW_THERMAL_SLOWDOWN, SW_POWER_CAP, Fault, TrainingJob, simulate

JOB = TrainingJob(seed=11)
ONSET, END = 600.0, 1200.0


def run(kind: str, gpu: int | None, severity: float = 0.2) -> tuple:
    telemetry = simulate(JOB, [Fault(kind, 1, gpu, ONSET, END, severity)], 1800)
    active = (telemetry.times >= ONSET) & (telemetry.times < END)
    return telemetry, active


def mean(values: np.ndarray) -> float:
    return float(np.nanmean(values))


def test_clean_job_has_no_slowdown_and_no_throttle_bits() -> None:
    telemetry = simulate(JOB, [], 3600)
    assert np.nanmax(np.abs(telemetry.slowdown())) == pytest.approx(0, abs=1e-12)
    assert np.nansum(telemetry.gpu["clock_event_reasons"]) == 0
    running = ~np.isnan(telemetry.step_s)
    assert mean(telemetry.gpu["util_pct"][:, running]) > 95


@pytest.mark.parametrize(("kind", "gpu"), [("thermal", 3), ("power_cap", 5), ("slow_nic", None), ("slow_host", None)])
@pytest.mark.parametrize("severity", [0.05, 0.1, 0.2, 0.5])
def test_step_time_follows_the_slowest_rank(kind: str, gpu: int | None, severity: float) -> None:
    telemetry, active = run(kind, gpu, severity)
    slowdown = telemetry.slowdown()
    np.testing.assert_allclose(slowdown[active & ~np.isnan(slowdown)], severity, rtol=1e-9)
    assert np.nanmax(np.abs(slowdown[~active])) < 1e-12


@pytest.mark.parametrize("kind", ["thermal", "power_cap"])
def test_waiting_peers_read_busy_on_utilisation_but_not_on_tensor_activity(kind: str) -> None:
    telemetry, active = run(kind, 3)
    culprit, peer = 8 + 3, 0
    util, tensor, power = (telemetry.gpu[k][:, active] for k in ("util_pct", "tensor_active_pct", "power_w"))
    assert abs(mean(util[culprit]) - mean(util[peer])) < 2, "utilisation cannot tell them apart"
    assert mean(tensor[culprit]) > 1.25 * mean(tensor[peer])
    assert mean(power[culprit]) > 1.1 * mean(power[peer])


def test_throttle_bits_mark_the_culprit_while_the_fault_lasts() -> None:
    thermal, active = run("thermal", 3)
    reported = ~np.isnan(thermal.gpu["clock_event_reasons"])  # dropped samples are gaps
    bits = np.nan_to_num(thermal.gpu["clock_event_reasons"]).astype(np.int64)
    assert (bits[11, active & reported[11]] & HW_THERMAL_SLOWDOWN).all() and not bits[11, ~active].any()
    assert not np.delete(bits, 11, axis=0).any()
    assert mean(thermal.gpu["sm_clock_mhz"][11, active]) < 0.9 * mean(thermal.gpu["sm_clock_mhz"][0, active])
    capped, _ = run("power_cap", 5)
    capped_reported = ~np.isnan(capped.gpu["clock_event_reasons"])
    capped_bits = np.nan_to_num(capped.gpu["clock_event_reasons"]).astype(np.int64)
    assert (capped_bits[13, active & capped_reported[13]] & SW_POWER_CAP).all() and not (
        capped_bits & HW_THERMAL_SLOWDOWN
    ).any()


def test_slow_nic_shows_on_its_port_not_on_gpus() -> None:
    telemetry, active = run("slow_nic", None)
    wait_rate = np.diff(telemetry.nic["xmit_wait"], axis=1)
    assert mean(wait_rate[1, active[1:]]) > 10 * mean(wait_rate[0, active[1:]])
    assert telemetry.nic["rate_gbps"][1, active].max() < telemetry.nic["rate_gbps"][0, active].min()
    tensor = telemetry.gpu["tensor_active_pct"][:, active]
    assert abs(mean(tensor[8:16]) - mean(tensor[0:8])) < 2


def test_slow_host_idles_its_gpus_outside_kernels() -> None:
    telemetry, active = run("slow_host", None)
    util = telemetry.gpu["util_pct"][:, active]
    assert mean(util[8:16]) < mean(util[0:8]) - 10


def test_checkpoints_pause_every_rank_together_and_last_stage_is_always_heavier() -> None:
    telemetry = simulate(JOB, [], 3 * 3600)
    paused = np.isnan(telemetry.step_s)
    assert 0 < paused.mean() < 0.05
    assert np.nanmax(telemetry.gpu["tensor_active_pct"][:, paused]) < 1
    running = ~paused
    last, first = telemetry.gpu["tensor_active_pct"][24:32, running], telemetry.gpu["tensor_active_pct"][0:8, running]
    assert mean(last) > 1.08 * mean(first)


def test_same_seed_same_telemetry_and_dropped_samples_are_gaps() -> None:
    a, b = simulate(JOB, [], 1800), simulate(JOB, [], 1800)
    np.testing.assert_array_equal(a.gpu["power_w"], b.gpu["power_w"])
    dropped = np.isnan(a.gpu["power_w"]).mean()
    assert 0.002 < dropped < 0.03


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"kind": "meteor", "gpu": 0}, "unknown fault kind"),
        ({"kind": "thermal", "gpu": None}, "a GPU"),
        ({"kind": "slow_nic", "gpu": 2}, "no GPU"),
        ({"kind": "thermal", "gpu": 0, "severity": 0}, "severity"),
    ],
)
def test_bad_faults_are_refused(kwargs: dict, message: str) -> None:
    fields = {"node": 0, "onset_s": 0.0, "end_s": 10.0, "severity": 0.1} | kwargs
    with pytest.raises(ValueError, match=message):
        Fault(**fields)
