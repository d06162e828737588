"""A site's health policy: what gpuscope may do to its nodes, and when. Loaded from YAML
(`gpuscope collector --health-policy FILE`; docs/health.md has every key). Safe by default: dry run, no
scheduler, so a new install only says what it would do."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import re2

from gpuscope.core.yaml_file import read_yaml

SCHEDULERS = ("none", "slurm", "kubernetes")


class PolicyError(ValueError):
    """A policy file gpuscope will not run with; the message says which key and why."""


@dataclass(frozen=True)
class HealthPolicy:
    scheduler: str = "none"  # none | slurm | kubernetes: who drains and resumes
    dry_run: bool = True  # record the drains and resumes it would run, run none, take no node out of service
    # Guard rails: gpuscope never holds out more nodes at once than the smaller of these (the share of
    # the fleet's nodes rounds down: 10% of 8 nodes is 0, so a small test cluster is never drained by
    # accident), never drains more than max_drains_per_hour, and never a node running a protected job.
    max_drained: int = 4
    max_drained_share: float = 0.10
    max_drains_per_hour: int = 4
    protect_jobs: tuple[str, ...] = ()  # RE2 patterns matched against the job ids running on a node
    protect_users: tuple[str, ...] = ()  # ... and against their users
    # Suspect: back to healthy after an hour without new evidence; unhealthy at the third finding in a day.
    suspect_clear_s: float = 3600.0
    suspect_limit: int = 3
    suspect_window_s: float = 86400.0
    # Return to service: a drained node is validated once it has been quiet this long (no new evidence,
    # every GPU reporting up, no row remap pending), then returns if the site's command passes.
    quiet_s: float = 900.0
    validate_command: tuple[str, ...] = ()  # argv; "{node}" is replaced by the node's name. Empty: none
    validate_timeout_s: float = 900.0
    scontrol: str = "scontrol"  # the Slurm client to run (its path, where not on PATH)
    every_s: float = 30.0  # one health cycle this often
    lag_s: float = 30.0  # judge telemetry this old and older: pushes arrive late (exporters push every 10-60 s)

    def drain_limit(self, nodes: int) -> int:
        return min(self.max_drained, math.floor(self.max_drained_share * nodes + 1e-9))

    def protects(self, job_id: str, user: str | None) -> str | None:
        """The pattern that protects this job, if any."""
        for pattern in self.protect_jobs:
            if re2.search(pattern, job_id):
                return f"protect_jobs {pattern!r}"
        for pattern in self.protect_users:
            if user and re2.search(pattern, user):
                return f"protect_users {pattern!r}"
        return None


def load_policy(path: Path) -> HealthPolicy:
    raw = read_yaml(path, "health policy", PolicyError)
    return policy_from(raw, str(path))


def policy_from(raw: Any, where: str = "health policy") -> HealthPolicy:
    if not isinstance(raw, dict):
        raise PolicyError(f"{where}: expected a mapping of keys to values")
    known = {f.name: f for f in fields(HealthPolicy)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise PolicyError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    values: dict[str, Any] = {}
    defaults = HealthPolicy()
    for key, value in raw.items():
        values[key] = _checked(key, value, getattr(defaults, key), where)
    policy = HealthPolicy(**values)
    if policy.scheduler not in SCHEDULERS:
        raise PolicyError(f"{where}: scheduler must be one of {', '.join(SCHEDULERS)}, not {policy.scheduler!r}")
    if not 0 <= policy.max_drained_share <= 1:
        raise PolicyError(f"{where}: max_drained_share is a share of the nodes, from 0 to 1")
    for pattern in (*policy.protect_jobs, *policy.protect_users):
        try:
            re2.compile(pattern)
        except re2.error as exc:
            raise PolicyError(f"{where}: protect pattern {pattern!r} is not a valid regular expression: {exc}") from exc
    return policy


def _checked(key: str, value: Any, default: Any, where: str) -> Any:
    """`value` in the type of the key's default, or a PolicyError naming the key."""
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise PolicyError(f"{where}: {key} must be true or false")
        return value
    if isinstance(default, tuple):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise PolicyError(f"{where}: {key} must be a list of strings")
        return tuple(value)
    if isinstance(default, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or not math.isfinite(value):
            raise PolicyError(f"{where}: {key} must be a number >= 0")
        if isinstance(default, int) and not float(value).is_integer():
            raise PolicyError(f"{where}: {key} must be a whole number")
        return type(default)(value)
    if not isinstance(value, str) or not value:
        raise PolicyError(f"{where}: {key} must be a non-empty string")
    return value
