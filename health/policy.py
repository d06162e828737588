"""A site's health policy: what gpuscope may do to its nodes, and when. Loaded from YAML
(`gpuscope collector --health-policy FILE`; docs/health.md has every key). Safe by default: dry run, no
scheduler, so a new install only says what it would do."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import re2
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from gpuscope.core.config_file import FileModel, checked, load_config_file


class PolicyError(ValueError):
    """A policy file gpuscope will not run with; the message says which key and why."""


def _compiles(pattern: str) -> str:
    try:
        re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


def _whole(value: Any) -> Any:
    """4.0 is the whole number 4, as it always was in this file; 4.5 is refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# One text may stand for a list of one: `protect_jobs: "^hero-"`.
Texts = Annotated[tuple[str, ...], BeforeValidator(lambda v: [v] if isinstance(v, str) else v), Field(strict=False)]
Patterns = Annotated[Texts, AfterValidator(lambda patterns: tuple(_compiles(p) for p in patterns))]
Count = Annotated[int, BeforeValidator(_whole), Field(ge=0)]
Seconds = Annotated[float, Field(ge=0)]


class HealthPolicy(FileModel):
    model_config = ConfigDict(frozen=True)

    scheduler: Literal["none", "slurm", "kubernetes"] = "none"  # who drains and resumes
    dry_run: bool = True  # record the drains and resumes it would run, run none, take no node out of service
    # Guard rails: gpuscope never holds out more nodes at once than the smaller of these (the share of
    # the fleet's nodes rounds down: 10% of 8 nodes is 0, so a small test cluster is never drained by
    # accident), never drains more than max_drains_per_hour, and never a node running a protected job.
    max_drained: Count = 4
    max_drained_share: Annotated[float, Field(ge=0, le=1)] = 0.10
    max_drains_per_hour: Count = 4
    protect_jobs: Patterns = ()  # RE2 patterns matched against the job ids running on a node
    protect_users: Patterns = ()  # ... and against their users
    # Suspect: back to healthy after an hour without new evidence; unhealthy at the third finding in a day.
    suspect_clear_s: Seconds = 3600.0
    suspect_limit: Count = 3
    suspect_window_s: Seconds = 86400.0
    # Return to service: a drained node is validated once it has been quiet this long (no new evidence,
    # every GPU reporting up, no row remap pending), then returns if the site's command passes.
    quiet_s: Seconds = 900.0
    validate_command: Texts = ()  # argv; "{node}" is replaced by the node's name. Empty: none
    validate_timeout_s: Seconds = 900.0
    scontrol: Annotated[str, Field(min_length=1)] = "scontrol"  # the Slurm client (its path, if not on PATH)
    every_s: Seconds = 30.0  # one health cycle this often
    lag_s: Seconds = 30.0  # judge telemetry this old and older: pushes arrive late (exporters push every 10-60 s)

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
    """The policy in `path`; an empty file is the default policy."""
    return load_config_file(path, HealthPolicy, PolicyError, _as_is, empty={})


def policy_from(raw: Any, where: str = "health policy") -> HealthPolicy:
    return checked(HealthPolicy, raw, PolicyError, _as_is, where)


def _as_is(policy: HealthPolicy) -> HealthPolicy:
    return policy
