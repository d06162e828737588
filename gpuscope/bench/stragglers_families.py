"""Straggler detection scored per workload family (gpuscope/bench/workloads): physics written apart from
the detector and from exporter/sim/training.py, by a hand that had not read the detector.

Seeds 0-15 of the first six families were looked at while the detector was revised (case by case where
they failed); seeds 16-63 were not, and are reported on their own as the held-out figures. `moe_fsdp`
was written later, by another hand, and never looked at while revising: all its seeds are held out.

Each case is fed to the detector as the watch would feed it: per-GPU tensor activity (SM activity where
a GPU has no tensor counter), utilisation, clock and clock-event reasons; transmit waits per
second, bytes sent per second and link rate per port. Scored as `bench stragglers` scores its own
suite: a declaration is right when it overlaps a fault (to 2 minutes after) and names its node (its
GPU for a GPU fault, its port for a NIC); recall per target slowdown; latency from onset to declaration
for >= 20%; the reported slowdown against the exact one; false alerts per 1,000 clean job-hours.
Faults the family marks as not localisable from telemetry (a starved host where waits yield) count
towards recall only when found.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuscope.bench.workloads import FAMILIES, TARGET_SLOWDOWNS, Case, GroundTruth, generate
from gpuscope.stragglers.detector import JobDetector, Settings, Straggler

UNSEEN = ("moe_fsdp",)  # added after the revision and never looked at: every seed of it is held out
TUNING = range(0, 16)
HELD_OUT = range(16, 64)
ALL = range(0, 64)
GRACE_S = 120.0
NVLINK_ERRORS = ("nvlink_replay_errors", "nvlink_recovery_errors", "nvlink_crc_errors")


def detect(case: Case) -> list[Straggler]:
    node_of = np.arange(case.ranks) // case.gpus_per_node
    detector = JobDetector.for_ranks(node_of, Settings(sample_s=case.sample_s), port_node=case.port_node)
    data = case.telemetry
    has_tensor = np.isfinite(data["tensor_active_pct"]).any()
    tensor = data["tensor_active_pct"] if has_tensor else data["sm_active_pct"]
    wait, sent = (_rate(data[key], case.sample_s) for key in ("xmit_wait", "xmit_bytes"))
    counters = [_rate(data[key], case.sample_s) for key in NVLINK_ERRORS if key in data]
    nvlink = sum(counters[1:], counters[0]) if counters else None
    for i, t in enumerate(case.times):
        detector.update(
            float(t),
            tensor[:, i],
            data["util_pct"][:, i],
            data["sm_clock_mhz"][:, i],
            data["clock_event_reasons"][:, i],
            wait[:, i],
            data["rate_gbps"][:, i],
            sent[:, i],
            sm=data["sm_active_pct"][:, i] if has_tensor else None,
            power=data["power_w"][:, i],
            nvlink_errors=None if nvlink is None else nvlink[:, i],
        )
    return detector.declared


def _rate(counter: np.ndarray, sample_s: float) -> np.ndarray:
    rate = np.diff(counter, axis=1, prepend=np.nan) / sample_s
    rate[rate < 0] = np.nan  # a counter reset: no rate for that interval
    return rate


@dataclass
class Tally:
    """What a run of cases came to, in counts, so that families can be pooled."""

    declared: int = 0
    right: int = 0  # declarations that overlap a fault and name its place
    overlapping: int = 0  # declarations that overlap a fault, at whatever place
    clean_hours: float = 0.0
    clean_alerts: int = 0
    found: dict[float, list[int]] = field(default_factory=lambda: {s: [0, 0] for s in TARGET_SLOWDOWNS})
    latencies: list[float] = field(default_factory=list)
    errors: list[float] = field(default_factory=list)

    def add(self, case: Case, stragglers: list[Straggler]) -> None:
        self.declared += len(stragglers)
        if not case.faults:
            self.clean_hours += case.duration_s / 3600
            self.clean_alerts += len(stragglers)
            return
        for fault in case.faults:
            target = min(TARGET_SLOWDOWNS, key=lambda s: abs(s - fault.target_slowdown))
            overlapping = [s for s in stragglers if _overlaps(s, fault)]
            matching = [s for s in overlapping if _names(s, fault)]
            self.overlapping += len(overlapping)
            self.right += len(matching)
            if matching:
                self.found[target][0] += 1
                if fault.true_slowdown >= 0.2:
                    self.latencies.append(min(s.declared_s for s in matching) - fault.onset_s)
                self.errors.append(abs(matching[0].slowdown - fault.true_slowdown) / fault.true_slowdown)
            if matching or fault.localisable:
                self.found[target][1] += 1

    def pooled(self, other: Tally) -> Tally:
        found = {s: [a + b for a, b in zip(self.found[s], other.found[s], strict=True)] for s in TARGET_SLOWDOWNS}
        return Tally(
            self.declared + other.declared,
            self.right + other.right,
            self.overlapping + other.overlapping,
            self.clean_hours + other.clean_hours,
            self.clean_alerts + other.clean_alerts,
            found,
            self.latencies + other.latencies,
            self.errors + other.errors,
        )

    def score(self) -> dict[str, Any]:
        big = [self.found[s] for s in TARGET_SLOWDOWNS if s >= 0.1]
        return {
            "precision": round(self.right / max(1, self.declared), 3),
            "recall_ge10": round(sum(d for d, _ in big) / max(1, sum(n for _, n in big)), 3),
            **{f"recall_{int(100 * s)}pct": round(d / max(1, n), 3) for s, (d, n) in self.found.items()},
            "localisation": round(self.right / max(1, self.overlapping), 3),
            "latency_p95_s": round(float(np.percentile(self.latencies, 95)), 1) if self.latencies else None,
            "slowdown_error_median": round(statistics.median(self.errors), 3) if self.errors else None,
            "false_alerts_per_1000_job_hours": round(1000 * self.clean_alerts / max(self.clean_hours, 1e-9), 2),
            "clean_job_hours": round(self.clean_hours, 1),
        }


def tally_family(family: str, seeds: range = HELD_OUT) -> Tally:
    tally = Tally()
    for seed in seeds:
        case = generate(family, seed)
        tally.add(case, detect(case))
    return tally


def score_family(family: str, seeds: range = HELD_OUT) -> dict[str, Any]:
    return tally_family(family, seeds).score()


def run() -> dict[str, Any]:
    """Per family: held-out seeds, and the seeds looked at while revising, apart; then every family's
    held-out seeds pooled ("overall")."""
    held_out = {family: tally_family(family, ALL if family in UNSEEN else HELD_OUT) for family in FAMILIES}
    report: dict[str, Any] = {
        family: {
            **tally.score(),
            "tuning_seeds": score_family(family, TUNING) if family not in UNSEEN else "none: never looked at",
        }
        for family, tally in held_out.items()
    }
    overall = Tally()
    for tally in held_out.values():
        overall = overall.pooled(tally)
    report["overall"] = overall.score()
    return report


def _overlaps(straggler: Straggler, fault: GroundTruth) -> bool:
    end = straggler.ended_s if straggler.ended_s is not None else float("inf")
    return straggler.started_s <= fault.end_s + GRACE_S and end >= fault.onset_s


def _names(straggler: Straggler, fault: GroundTruth) -> bool:
    port_named = fault.port is None or straggler.port == fault.port
    return (straggler.node, straggler.gpu) == (fault.node, fault.gpu) and port_named
