"""The health policy's `validation` mapping: which check a drained node must pass (docs/health.md, "Policy")."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from gpuscope.core.config_file import FileModel

Preset = Literal["command", "dcgm_diag", "nccl_all_reduce"]
Argv = Annotated[tuple[str, ...], BeforeValidator(lambda v: [v] if isinstance(v, str) else v), Field(strict=False)]
Binary = Annotated[str, Field(min_length=1)]

# Why only 2 and 3 (DCGM's suites, `dcgmi diag -r`): what a level says about a node back from a fault.
_LEVEL_REFUSED = {
    1: "level 1 runs only the deployment checks (libraries, permissions, seconds long) and exercises no GPU: "
    "it cannot vouch for hardware after a fault; use 2 (about 2 minutes) or 3 (about 15)",
    4: "level 4 (extended) runs for hours, longer than a node should wait to return; use 2 or 3, "
    "and run level 4 by hand when a node keeps failing",
}


class ValidationConfig(FileModel):
    """A built-in check: `dcgmi diag -r 2|3 -j`, or `all_reduce_perf` judged on its bus bandwidth."""

    model_config = ConfigDict(frozen=True)

    preset: Preset  # command: validate_command as it is; dcgm_diag; nccl_all_reduce
    level: int = 2  # dcgm_diag: the suite, 2 or 3
    dcgmi: Binary = "dcgmi"  # dcgm_diag: the client's path
    # dcgm_diag: the host engine to run on (`--host`); "{node}" is the node's name. Unset: the node
    # itself, or, with a launcher (which already runs dcgmi there), the local host engine.
    host: Binary | None = None
    all_reduce_perf: Binary = "all_reduce_perf"  # nccl_all_reduce: the nccl-tests binary's path
    gpus: Annotated[int, Field(ge=1)] = 8  # nccl_all_reduce: GPUs of the node the test uses (-g)
    min_busbw_gbps: Annotated[float, Field(ge=0)] | None = None  # nccl_all_reduce: the site's threshold
    launcher: Argv = ()  # argv put before the command to run it on the node ("{node}" replaced)
    timeout_s: Annotated[float, Field(gt=0)] | None = None  # unset: validate_timeout_s

    @field_validator("level")
    @classmethod
    def _a_level_that_tests_hardware(cls, level: int) -> int:
        if level in _LEVEL_REFUSED:
            raise ValueError(_LEVEL_REFUSED[level])
        if level not in (2, 3):
            raise ValueError(f"must be 2 or 3 (dcgmi diag's medium and long suites), got {level!r}")
        return level

    @model_validator(mode="after")
    def _nccl_has_its_threshold(self) -> ValidationConfig:
        # The bandwidth a healthy node reaches depends on its GPUs and fabric: no default can be right.
        if self.preset == "nccl_all_reduce" and self.min_busbw_gbps is None:
            raise ValueError(
                "preset nccl_all_reduce needs min_busbw_gbps: the average bus bandwidth (GB/s) a healthy "
                "node of this site reaches in the same run"
            )
        return self


def _one_check(config: ValidationConfig | None, info: ValidationInfo) -> ValidationConfig | None:
    """validate_command and a preset are two answers to one question: the policy gives one."""
    command = info.data.get("validate_command")
    if config is None:
        return None
    if config.preset == "command" and not command:
        raise ValueError("preset command runs validate_command, which is not set")
    if config.preset != "command" and command:
        raise ValueError(
            f"preset {config.preset} and validate_command are both set: keep one "
            "(validate_command is the preset command)"
        )
    return config


# The HealthPolicy field: defined after validate_command, so that its check sees it.
Validation = Annotated[ValidationConfig | None, AfterValidator(_one_check)]
