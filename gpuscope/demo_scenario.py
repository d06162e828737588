"""What the demo stages on top of the simulated cluster's everyday jobs, so that a newcomer sees within
its first minutes what gpuscope is for, each found by the real product (the straggler watch, the alert
rules), not drawn on the page:

- a synchronous training job on a whole rack, running for 40 minutes when the demo starts, whose GPU's
  fan fails a few seconds in: the GPU heats into thermal slowdown, its clocks drop, and every step of the
  job waits for it (a straggler, and temperature alerts on the same GPU);
- an idle job: a notebook holding a node's GPUs and memory for the last 45 minutes, running nothing;
- an XID: an uncorrectable ECC error on a GPU in use (XIDs 48, 63, 94), leaving a row remap pending;
- a flapping InfiniBand link: one port drops for a few seconds every 90 s and retrains;
- that rack drawing close to its power budget (set below the GPUs' nameplate, as sites provision).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuscope.exporter.sim import JobRun, JobSchedule, NodeSpec, SimNodeSource
from gpuscope.exporter.sim.jobs import SlowGpu

TRAINING_JOB = "1000001"  # outside the random jobs' six digits, so never one of theirs
IDLE_JOB = "1000002"
TRAINING_RAN_S = 40 * 60  # long enough for the watch's warm-up and baselines (stragglers/detector.py)
CLOCKS_DROP_AFTER_S = 45.0  # after the demo goes live; the fan fails FAN_LEAD_S before (exporter/sim/node.py)
STRAGGLER_SEVERITY = 0.25  # every step 25% longer
XID_AFTER_S = 60.0
FLAP_AFTER_S = 30.0
# Provisioned below the 700 W nameplate, as sites do: the training job's GPUs draw ~0.55 kW each while
# healthy (99% of this) and ~0.49 kW while they wait for the straggler (88%), near the budget in both.
RACK_BUDGET_KW_PER_GPU = 0.5625
STAGED_FOR_S = 8 * 3600


@dataclass
class Scenario:
    events: list[str] = field(default_factory=list)  # what to watch for, one line each, for the banner
    rack_budgets_kw: dict[str, float] = field(default_factory=dict)  # "cluster/rack" -> kW


def staged_rack(topology: tuple[NodeSpec, ...]) -> str:
    """The rack the training job runs on, and the one whose power budget is set tight."""
    racks = list(dict.fromkeys(node.rack for node in topology))
    return racks[1] if len(racks) > 1 else racks[0]


def rack_budgets_kw(topology: tuple[NodeSpec, ...]) -> dict[str, float]:
    """The staged rack's budget ("cluster/rack" -> kW): known before anything runs, so that the collector
    (for its rack power alert) and the dashboard read the same file."""
    rack = staged_rack(topology)
    gpus_in_rack = sum(node.gpus for node in topology if node.rack == rack)
    budget = math.floor(gpus_in_rack * RACK_BUDGET_KW_PER_GPU * 2) / 2  # to the half kW
    return {f"{topology[0].cluster}/{rack}": float(budget)}


def stage(topology: tuple[NodeSpec, ...], schedule: JobSchedule, sources: list[SimNodeSource], now: float) -> Scenario:
    """Pin the staged jobs and faults; `now` is when the back-filled history ends and live data begins."""
    scenario = Scenario()
    rack = staged_rack(topology)
    training = tuple(node.index for node in topology if node.rack == rack)[:4]
    spare = [node.index for node in topology if node.index not in training]

    job = JobRun(
        job_id=TRAINING_JOB,
        user="alice",
        name="llama-pretrain",
        nodes=training,
        start=now - TRAINING_RAN_S,
        end=now + STAGED_FOR_S,
        step_seconds=1.0,
        intensity=0.9,
        heavy_rank_extra=0.05 if len(training) > 1 else 0.0,
    )
    schedule.pin(job)
    slow_node = training[1] if len(training) > 1 else training[0]
    slow_gpu = min(5, topology[slow_node].gpus - 1)
    schedule.slow_gpu(job.job_id, SlowGpu(slow_node, slow_gpu, now + CLOCKS_DROP_AFTER_S, STRAGGLER_SEVERITY))
    name = topology[slow_node].name
    scenario.events.append(
        f"job {TRAINING_JOB} ({job.name}, {len(training)} nodes): the fan of GPU {slow_gpu} on {name} fails;"
        " it heats into thermal slowdown and the whole job waits for it (a straggler, in about 2 minutes)"
    )
    scenario.rack_budgets_kw.update(rack_budgets_kw(topology))
    budget = scenario.rack_budgets_kw[f"{topology[0].cluster}/{rack}"]
    scenario.events.append(f"{rack} runs close to its {budget:g} kW power budget")

    if len(spare) >= 2:
        idle = spare[-1]
        schedule.pin(
            JobRun(IDLE_JOB, "hiro", "jupyter", (idle,), now - 45 * 60, now + STAGED_FOR_S, 1.0, 0.0, 0.0, idle=True)
        )
        scenario.events.append(f"job {IDLE_JOB} holds the GPUs of {topology[idle].name} and runs nothing")
    if spare:
        xid_node = spare[0]
        sources[xid_node].inject_xid(now + XID_AFTER_S, 2 % topology[xid_node].gpus, (48, 63, 94), uncorrectable=True)
        scenario.events.append(f"an uncorrectable ECC error (XID 48, 63, 94) on {topology[xid_node].name}")
    flap_node = spare[len(spare) // 2] if spare else training[0]
    if topology[flap_node].ib_ports:
        sources[flap_node].flap_port(min(3, topology[flap_node].ib_ports - 1), now + FLAP_AFTER_S)
        scenario.events.append(f"an InfiniBand link of {topology[flap_node].name} flaps every 90 s")
    return scenario
