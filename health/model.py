"""The health model's words: states, evidence, transitions.

A node moves healthy -> suspect -> unhealthy (drain requested) -> drained -> validating -> healthy.
Every move is a Transition with its reason and actor; every reason rests on Evidence that a documented
rule found in the telemetry (health/evidence.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class State(StrEnum):
    HEALTHY = "healthy"
    SUSPECT = "suspect"  # something to watch: no action yet
    UNHEALTHY = "unhealthy"  # take it out: a drain is requested (or would be, in dry run)
    DRAINED = "drained"  # the scheduler has it out of service
    VALIDATING = "validating"  # quiet for the window: checks run before it returns


class Severity(StrEnum):
    """What one piece of evidence asks for on its own."""

    IGNORE = "ignore"  # recorded for the audit trail, no state change (an application's own error)
    SUSPECT = "suspect"
    UNHEALTHY = "unhealthy"


class Actor(StrEnum):
    GPUSCOPE = "gpuscope"
    HUMAN = "human"  # an operator, through gpuscope or the scheduler
    SCHEDULER = "scheduler"  # Slurm or Kubernetes changed the node on its own


@dataclass(frozen=True)
class Evidence:
    """One finding about a GPU (gpu_id set) or its node (gpu_id None).

    `kind` names the rule (xid, ecc_uncorrectable, remap_pending, remap_failed, gpu_lost, nvlink_flap,
    ib_flap, thermal_slowdown, repeat_straggler, ...); `code` is the XID or another number the rule keys
    on; `detail` says it in words an operator reads in chat ("XID 79 (GPU has fallen off the bus) on
    GPU 3"); `action` is what the rule recommends (none, reset_gpu, reboot_node, drain_rma, ...)."""

    at: datetime
    node_id: int
    gpu_id: int | None
    kind: str
    severity: Severity
    detail: str
    code: int | None = None
    action: str = "none"
    gpu_index: int | None = None  # for words: "GPU 3"


@dataclass(frozen=True)
class Transition:
    at: datetime
    node_id: int
    from_state: State
    to_state: State
    reason: str
    actor: Actor
