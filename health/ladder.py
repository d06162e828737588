"""The escalation ladder: which repair a node gets for a failure, given how often the same cause brought
it down before. A repair that held resets nothing by itself: the count is of the failures of one cause on
one node within the policy's ladder_window_s, so a node that stays healthy for the window starts again at
the bottom.

The default follows GPUd and NVIDIA's XID guidance: first reset the GPU, then reboot the node, and once
two reboots for the same cause within 7 days did not hold, stop returning it automatically and hold it
for hardware inspection (an RMA candidate):

    ladder: [reset_gpu, reboot_node, reboot_node, inspect]      # 1st, 2nd, 3rd, 4th failure of a cause
    ladder_window_s: 604800

The evidence sets a floor: a finding whose own recommendation (the driver's recovery action, else the XID
catalogue) is a reboot is never answered with a GPU reset, and one that asks for an RMA (`drain_rma`) is
held for inspection at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Repair = Literal["reset_gpu", "reboot_node", "inspect"]
CommandRepair = Literal["reset_gpu", "reboot_node"]  # the steps a site's command carries out (inspect is a hold)
REPAIRS: tuple[Repair, ...] = ("reset_gpu", "reboot_node", "inspect")  # in rising order
DEFAULT_LADDER: tuple[Repair, ...] = ("reset_gpu", "reboot_node", "reboot_node", "inspect")
DEFAULT_WINDOW_S = 7 * 86400.0
INSPECT_HOLD = "gpuscope inspection: "  # the hold an `inspect` step puts on a node: only an operator lifts it

# A finding's recommended action (health/model.Evidence.action) -> the least repair that answers it.
FLOORS: dict[str, Repair] = {"reset_gpu": "reset_gpu", "reboot_node": "reboot_node", "drain_rma": "inspect"}

WORDS = {"reset_gpu": "reset the GPU", "reboot_node": "reboot the node", "inspect": "hold for hardware inspection"}


def ladder_problem(steps: tuple[str, ...]) -> str | None:
    """What makes a ladder impossible, or None: it must have a step, go only up, and end at `inspect` if
    it has one (nothing comes after a node held for inspection)."""
    if not steps:
        return "the ladder needs at least one step (the default is reset_gpu, reboot_node, reboot_node, inspect)"
    for i, step in enumerate(steps):
        if step not in REPAIRS:
            return f"step {i + 1} {step!r} is not a repair; the repairs are {', '.join(REPAIRS)}"
    for i in range(1, len(steps)):
        if REPAIRS.index(steps[i]) < REPAIRS.index(steps[i - 1]):
            return f"step {i + 1} ({steps[i]}) comes after {steps[i - 1]}: a ladder only goes up"
    if "inspect" in steps[:-1]:
        return "inspect must be the last step: a node held for inspection never returns by itself"
    return None


@dataclass(frozen=True)
class Choice:
    rung: int  # the step taken, from 0
    repair: Repair
    reason: str


def choose(steps: tuple[Repair, ...], window_s: float, before: int, cause: str, recommended: str) -> Choice:
    """The repair for a failure of `cause` that `before` earlier failures of it on this node (within the
    window) preceded, with `recommended` the finding's own action."""
    rung = min(before, len(steps) - 1)
    repair = steps[rung]
    nth = _ordinal(before + 1)
    reason = f"{nth} failure of {cause} within {_days(window_s)}: step {rung + 1} of the ladder"
    floor = FLOORS.get(recommended)
    if floor is not None and REPAIRS.index(floor) > REPAIRS.index(repair):
        repair = floor
        reason += f", raised to {floor}: the finding asks for it"
    return Choice(rung, repair, reason)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _days(seconds: float) -> str:
    days = seconds / 86400
    return f"{days:g} d" if days >= 1 else f"{seconds / 3600:g} h"
