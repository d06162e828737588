"""The detector's principles (issue 37), each on a job drawn from tests/stragglers/models.py:

- only synchronous work is judged: independent replicas (serving) get no straggler, however uneven;
- only the rank the others wait for is blamed: a GPU doing more work at normal clocks (a hot expert) is
  not slow, a GPU doing the same work slower at normal clocks is degraded;
- slowness every port shares (congestion from outside the job) is the fabric's, not a rank's.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from gpuscope.stragglers.detector import JobDetector, Settings
from gpuscope.stragglers.events import Findings, Straggler
from gpuscope.stragglers.readings import Readings
from tests.stragglers.models import SAMPLE_S, Lockstep, Telemetry, replicas

ONSET_S, END_S = 3000.0, 4200.0


class Fed(NamedTuple):
    detector: JobDetector
    declared: list[Straggler]


def feed(tel: Telemetry, gpus: int = 4) -> Fed:
    detector = JobDetector.for_ranks(np.arange(tel.tensor.shape[0]) // gpus, Settings(sample_s=SAMPLE_S))
    link = np.full(tel.sent.shape[0], 400.0)
    findings = Findings()
    for i, now in enumerate(tel.t):
        readings = Readings(
            float(now), work=tel.tensor[:, i], util_pct=tel.util[:, i], sm_clock_mhz=tel.clock[:, i],
            clock_event_reasons=tel.reasons[:, i], xmit_wait_per_s=tel.wait[:, i], link_gbps=link,
            xmit_bytes_per_s=tel.sent[:, i], sm_active_pct=tel.sm[:, i], power_w=tel.power[:, i],
        )  # fmt: skip
        findings.add(detector.update(readings))
    return Fed(detector, findings.stragglers)


def _at(stragglers: list[Straggler]) -> list[tuple[int, int | None, str]]:
    return [(s.node, s.gpu, s.cause) for s in stragglers]


def test_a_lockstep_job_is_judged_and_its_throttled_gpu_found() -> None:
    job = Lockstep()
    job.clock[9, job.between(ONSET_S, END_S)] = 0.75  # node 2, GPU 1
    detector, declared = feed(job.telemetry())
    assert detector.model == "synchronous"
    assert _at(declared) == [(2, 1, "thermal")]


def test_independent_replicas_are_not_judged_however_uneven() -> None:
    """One replica degraded (busy twice as long for its load) for twenty minutes: nobody waits for it."""
    tel = replicas()
    during = (tel.t >= ONSET_S) & (tel.t < END_S)
    tel.sm[4:8, during] = np.minimum(100, 2 * tel.sm[4:8, during])
    detector, declared = feed(tel)
    assert detector.model == "independent"
    assert detector.wander >= 0.1
    assert declared == []


def test_more_work_at_normal_clocks_is_not_a_straggler() -> None:
    """A hot expert: one GPU gets 30% more of the tokens for ten minutes, then another: each does more
    work at normal clocks (work, busy time and its share of the power rise together) and the others wait."""
    job = Lockstep()
    middle = (ONSET_S + END_S) / 2
    job.work[5, job.between(ONSET_S, middle)] = 1.3
    job.work[17, job.between(middle, END_S)] = 1.3
    detector, declared = feed(job.telemetry())
    assert detector.model == "synchronous"
    assert declared == []


def test_a_gpu_slower_at_normal_clocks_is_named_degraded() -> None:
    """The same work at 70% speed (memory stalls): busy longer, no more work, no throttle reason."""
    job = Lockstep()
    job.speed[14, job.between(ONSET_S, END_S)] = 0.7  # node 3, GPU 2
    declared = feed(job.telemetry()).declared
    assert _at(declared) == [(3, 2, "gpu_degraded")]
    assert 0.25 <= declared[0].slowdown <= 0.45  # steps 3.0 s -> 4.03 s: 0.34 slower


def test_congestion_on_every_port_is_the_fabrics_not_a_ranks() -> None:
    """Another job's traffic on the switches: the exchange takes three times as long, every port waits,
    and a node shared with that job carries its bytes too."""
    job = Lockstep()
    during = job.between(ONSET_S, END_S)
    job.comm[during] *= 3
    job.waits[:, during] = 0.3
    job.extra_sent[5, during] = 6e9
    declared = feed(job.telemetry()).declared
    assert _at(declared) == [(-1, None, "fabric")]
    assert 0.3 <= declared[0].slowdown <= 0.5  # steps 3.0 s -> 4.2 s: 0.4 slower
