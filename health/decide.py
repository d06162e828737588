"""The health loop's decisions that depend on nothing but their inputs, shared by the live loop
(health/loop.py) and the replay of a policy over history (health/replay.py): a policy tried on history
is judged by the very rules that would run it."""

from __future__ import annotations

from collections.abc import Sequence

from gpuscope.health.model import Severity, State
from gpuscope.health.policy import HealthPolicy
from gpuscope.health.store import GuardCounts


def after_findings(state: State, worst: Severity, recent: int, policy: HealthPolicy) -> State:
    """The state a node in `state` moves to on new findings that count, `worst` the most severe of them and
    `recent` how many counted in the suspect window."""
    if worst == Severity.UNHEALTHY and state in (State.HEALTHY, State.SUSPECT, State.VALIDATING):
        return State.UNHEALTHY
    if state == State.VALIDATING:
        return State.DRAINED  # checked again after another quiet window
    if state == State.HEALTHY:
        return State.SUSPECT
    if state == State.SUSPECT and recent >= policy.suspect_limit:
        return State.UNHEALTHY
    return state


def refusal(policy: HealthPolicy, counts: GuardCounts, jobs: Sequence[tuple[str, str | None]]) -> str | None:
    """Why the guard rails forbid draining a node running `jobs` now, or None."""
    limit = policy.drain_limit(counts.fleet)
    if counts.held_out >= limit:
        return (
            f"drain refused: {counts.held_out} node(s) already out of service by gpuscope, the policy allows"
            f" {limit} (max_drained {policy.max_drained}, max_drained_share {policy.max_drained_share:g}"
            f" of {counts.fleet} nodes)"
        )
    if counts.drains >= policy.max_drains_per_hour:
        return f"drain refused: {counts.drains} drains in the last hour, the policy allows {policy.max_drains_per_hour}"
    for job_id, user in jobs:
        rule = policy.protects(job_id, user)
        if rule is not None:
            return f"drain refused: it runs job {job_id} ({user or 'user unknown'}), protected by {rule}"
    return None


def guard_rail(reason: str) -> str:
    """Which guard rail a refusal names: max_drained, max_drains_per_hour or protect."""
    if "out of service by gpuscope" in reason:
        return "max_drained"
    if "drains in the last hour" in reason:
        return "max_drains_per_hour"
    return "protect"
