"""A site's health policy: what gpuscope may do to its nodes, and when. Loaded from YAML
(`gpuscope collector --health-policy FILE`; docs/health.md has every key). Safe by default: dry run, no
scheduler, so a new install only says what it would do."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

import re2
from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field

from gpuscope.core.config_file import FileModel, checked, load_config_file, load_config_text
from gpuscope.health.ladder import DEFAULT_LADDER, DEFAULT_WINDOW_S, CommandRepair, ladder_problem
from gpuscope.health.validation.config import Validation


class PolicyError(ValueError):
    """A policy file gpuscope will not run with; the message says which key and why."""


def _compiles(pattern: str) -> str:
    try:
        re2.compile(pattern)
    except re2.error as exc:
        raise ValueError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


def _possible_ladder(steps: tuple[str, ...]) -> tuple[str, ...]:
    if (problem := ladder_problem(steps)) is not None:
        raise ValueError(problem)
    return steps


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
    validate_command: Texts = ()  # argv; "{node}": the node's name, "{gpu}": the GPU checked or "all". Empty: none
    validate_timeout_s: Seconds = 900.0
    validation: Validation = None  # a built-in check instead (dcgmi diag, NCCL all_reduce_perf): health/validation/
    scontrol: Annotated[str, Field(min_length=1)] = "scontrol"  # the Slurm client (its path, if not on PATH)
    every_s: Seconds = 30.0  # one health cycle this often
    lag_s: Seconds = 30.0  # judge telemetry this old and older: pushes arrive late (exporters push every 10-60 s)
    # Escalation (health/ladder.py): the repair for a node's 1st, 2nd, ... failure of one cause within
    # ladder_window_s; the last step repeats. `inspect` holds the node for hardware inspection.
    ladder: Annotated[Texts, AfterValidator(_possible_ladder)] = DEFAULT_LADDER
    ladder_window_s: Annotated[float, Field(gt=0)] = DEFAULT_WINDOW_S
    # The site's command per repair, argv without a shell: "{node}", "{gpu}" (the GPU's index, or "all" when
    # the finding names no GPU) and "{gpu_uuid}" are replaced. A repair without one is recorded as
    # recommended and left to the site; the drained node is validated after its quiet window as before.
    repair_commands: dict[CommandRepair, Annotated[Texts, Field(min_length=1)]] = Field(default_factory=dict)
    repair_timeout_s: Annotated[float, Field(gt=0)] = 1800.0

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


def policy_from_text(text: str, name: str = "policy") -> HealthPolicy:
    """A policy sent as text (a replay's candidate over the API); errors name `name` and the line."""
    return load_config_text(text, name, HealthPolicy, PolicyError, _as_is, empty={})


def policy_from(raw: Any, where: str = "health policy") -> HealthPolicy:
    return checked(HealthPolicy, raw, PolicyError, _as_is, where)


def _as_is(policy: HealthPolicy) -> HealthPolicy:
    return policy
