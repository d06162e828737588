"""The validation presets: `dcgmi diag -r 2|3` and NCCL's `all_reduce_perf` run for a drained node and their
output read into a verdict naming the failed test, against stand-ins printing what the tools print
(tests/health/fake_bin/); the site's own command as before; and the policy keys refused with file and line."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpuscope.health.policy import PolicyError, load_policy, policy_from
from gpuscope.health.schedulers.base import Outcome
from gpuscope.health.validate import run_validation
from gpuscope.health.validation.outcome import ValidationOutcome

FAKE_BIN = Path(__file__).parent / "fake_bin"
DCGMI, ALL_REDUCE = str(FAKE_BIN / "dcgmi"), str(FAKE_BIN / "all_reduce_perf")


def validate(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, env: dict[str, str], **policy: Any) -> ValidationOutcome:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("FAKE_ARGV_FILE", str(tmp_path / "argv.json"))
    return asyncio.run(run_validation(policy_from(policy), "node-17"))


def argv_seen(tmp_path: Path) -> list[str]:
    return list(json.loads((tmp_path / "argv.json").read_text()))


def dcgm(**keys: Any) -> dict[str, Any]:
    return {"validation": {"preset": "dcgm_diag", "dcgmi": DCGMI, **keys}}


def nccl(**keys: Any) -> dict[str, Any]:
    return {"validation": {"preset": "nccl_all_reduce", "all_reduce_perf": ALL_REDUCE, "min_busbw_gbps": 100, **keys}}


def test_dcgm_diag_passes_a_healthy_node_on_its_host_engine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outcome = validate(monkeypatch, tmp_path, {"FAKE_DCGMI_MODE": "pass"}, **dcgm())
    assert isinstance(outcome, Outcome) and outcome.ok and outcome.failed_test is None
    assert outcome.detail == f"{DCGMI} diag -r 2 -j --host node-17: passed: 12 tests, none failed"
    assert argv_seen(tmp_path) == ["diag", "-r", "2", "-j", "--host", "node-17"]


@pytest.mark.parametrize("form", ["json", "json2", "table"])
def test_dcgm_diag_names_the_failed_test_and_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, form: str) -> None:
    env = {"FAKE_DCGMI_MODE": "memory_gpu3", "FAKE_DCGMI_FORMAT": form}
    outcome = validate(monkeypatch, tmp_path, env, **dcgm(level=3))
    assert not outcome.ok and outcome.failed_test == "GPU Memory (GPU 3)"
    assert outcome.detail.startswith(f"{DCGMI} diag -r 3 -j --host node-17: failed: GPU Memory (GPU 3): GPU 3 Found")
    # The table cuts the warning into 45-character pieces: read back whole.
    assert "reset it or reboot the node to resolve this issue." in outcome.detail


def test_dcgm_diag_through_a_launcher_uses_the_local_host_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    outcome = validate(monkeypatch, tmp_path, {}, **dcgm(launcher=["env", "FAKE_DCGMI_MODE=memory_gpu3", "ON={node}"]))
    assert outcome.failed_test == "GPU Memory (GPU 3)"
    assert outcome.detail.startswith(f"env FAKE_DCGMI_MODE=memory_gpu3 ON=node-17 {DCGMI} diag -r 2 -j: failed")
    assert argv_seen(tmp_path) == ["diag", "-r", "2", "-j"]


def test_dcgm_diag_fails_on_its_exit_status_or_an_output_it_cannot_read(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    refused = validate(monkeypatch, tmp_path, {}, validation={"preset": "dcgm_diag", "dcgmi": "false"})
    assert not refused.ok and refused.failed_test == "dcgmi exit 1"
    silent = validate(monkeypatch, tmp_path, {}, validation={"preset": "dcgm_diag", "dcgmi": "true"})
    assert not silent.ok and silent.failed_test == "no diagnostic results"


def test_all_reduce_passes_above_the_sites_bus_bandwidth(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outcome = validate(monkeypatch, tmp_path, {"FAKE_NCCL_MODE": "pass"}, **nccl())
    assert outcome.ok and outcome.failed_test is None
    assert outcome.detail == f"{ALL_REDUCE} -b 8 -e 8G -f 2 -g 8: passed: bus bandwidth 131.7 GB/s"
    assert argv_seen(tmp_path) == ["-b", "8", "-e", "8G", "-f", "2", "-g", "8"]


@pytest.mark.parametrize(
    ("mode", "failed_test", "said"),
    [
        ("low_bandwidth", "bus bandwidth 32.9 GB/s < 100 GB/s", "bus bandwidth 32.9 GB/s below the site's 100 GB/s"),
        ("wrong", "wrong results at size 536870912 B", "all_reduce_perf found wrong results at size 536870912 B"),
        ("crash", "no average bus bandwidth", "no 'Avg bus bandwidth' line: the run did not finish (exit 1)"),
    ],
)
def test_all_reduce_fails_naming_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str, failed_test: str, said: str
) -> None:
    outcome = validate(monkeypatch, tmp_path, {"FAKE_NCCL_MODE": mode}, **nccl(gpus=4))
    assert not outcome.ok and outcome.failed_test == failed_test
    assert outcome.detail == f"{ALL_REDUCE} -b 8 -e 8G -f 2 -g 4: failed: {failed_test}: {said}"


@pytest.mark.parametrize("preset", [dcgm, nccl])
def test_a_hang_is_ended_by_the_timeout(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, preset: Any) -> None:
    env = {"FAKE_DCGMI_MODE": "hang", "FAKE_NCCL_MODE": "hang"}
    started = time.monotonic()
    outcome = validate(monkeypatch, tmp_path, env, **preset(timeout_s=1))
    assert time.monotonic() - started < 3
    assert not outcome.ok and outcome.failed_test == "timeout after 1 s"
    assert outcome.detail.endswith(": no result in 1 s")


def test_a_missing_binary_fails_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outcome = validate(monkeypatch, tmp_path, {}, validation={"preset": "dcgm_diag", "dcgmi": str(tmp_path / "dcgmi")})
    assert not outcome.ok and outcome.failed_test == f"cannot run {tmp_path / 'dcgmi'}"
    assert outcome.detail.startswith(f"{tmp_path / 'dcgmi'} diag -r 2 -j --host node-17: cannot run: ")


def test_a_killed_check_is_a_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    outcome = validate(monkeypatch, tmp_path, {}, validate_command=["sh", "-c", "kill -9 $$"])
    assert not outcome.ok and outcome.failed_test == "killed by SIGKILL"


def test_the_sites_command_works_as_before(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    check = ["sh", "-c", "test {node} = n2 || { echo not n2; exit 3; }"]
    outcome = validate(monkeypatch, tmp_path, {}, validate_command=check)
    assert (outcome.ok, outcome.failed_test) == (False, "exit 3")
    assert outcome.detail == "sh -c test node-17 = n2 || { echo not n2; exit 3; }: failed (exit 3): not n2"
    explicit = validate(monkeypatch, tmp_path, {}, validate_command=["true"], validation={"preset": "command"})
    assert (explicit.ok, explicit.detail, explicit.failed_test) == (True, "true: passed", None)
    nothing = validate(monkeypatch, tmp_path, {})
    assert nothing.ok and nothing.detail == "checks passed; no validation command configured"


# (the policy file, the problem's line, what the message says there)
POLICY_PROBLEMS = [
    (
        "validate_command: [/usr/local/bin/check]\nvalidation:\n  preset: dcgm_diag\n",
        2,
        "validation: preset dcgm_diag and validate_command are both set: keep one",
    ),
    (
        "validation:\n  preset: nccl_all_reduce\n  min_busbw_gbps: 300\nvalidate_command: [check]\n",
        1,
        "validation: preset nccl_all_reduce and validate_command are both set",
    ),
    (
        "validation:\n  preset: gpu_burn\n",
        2,
        "validation.preset: must be one of 'command', 'dcgm_diag' or 'nccl_all_reduce', got 'gpu_burn'",
    ),
    ("validation:\n  preset: dcgm_diag\n  level: 1\n", 3, "validation.level: level 1 runs only the deployment checks"),
    ("validation:\n  preset: dcgm_diag\n  level: 4\n", 3, "validation.level: level 4 (extended) runs for hours"),
    ("validation:\n  preset: dcgm_diag\n  level: 7\n", 3, "validation.level: must be 2 or 3"),
    (
        "validation:\n  preset: nccl_all_reduce\n  min_busbw_gbps: -5\n",
        3,
        "validation.min_busbw_gbps: must be >= 0, got -5",
    ),
    ("validation:\n  preset: nccl_all_reduce\n", 1, "validation: preset nccl_all_reduce needs min_busbw_gbps"),
    ("validation:\n  preset: command\n", 1, "validation: preset command runs validate_command, which is not set"),
    ("validation:\n  preset: dcgm_diag\n  lvel: 3\n", 3, "validation.lvel: unknown key (did you mean level?)"),
    ("validation:\n  preset: dcgm_diag\n  launcher: [srun, 8]\n", 3, "validation.launcher[1]: expected a string"),
]


@pytest.mark.parametrize(("text", "line", "message"), POLICY_PROBLEMS)
def test_a_bad_validation_key_is_refused_with_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as refused:
        load_policy(path)
    assert f"{path}:{line}: {message}" in str(refused.value)


def test_a_full_validation_mapping_loads(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(
        "validation:\n  preset: nccl_all_reduce\n  all_reduce_perf: /opt/nccl-tests/all_reduce_perf\n"
        "  min_busbw_gbps: 300\n  launcher: [srun, -w, '{node}', --gpus, '8']\n  timeout_s: 900\n"
    )
    validation = load_policy(path).validation
    assert validation is not None and validation.launcher == ("srun", "-w", "{node}", "--gpus", "8")
    assert (validation.min_busbw_gbps, validation.timeout_s) == (300, 900)
