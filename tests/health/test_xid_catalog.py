"""The XID catalogue as data: complete, in our words, and faithful to NVIDIA's immediate actions."""

from __future__ import annotations

import csv
from importlib import resources

import pytest

from gpuscope.health import xid_catalog as catalog_module
from gpuscope.health.model import Severity
from gpuscope.health.xid_catalog import ACTIONS, UNKNOWN_ACTION, XidRule, recovery_action, xid_catalog, xid_rule

IGNORE, SUSPECT, UNHEALTHY = Severity.IGNORE, Severity.SUSPECT, Severity.UNHEALTHY


def _rows() -> list[dict[str, str]]:
    text = resources.files("gpuscope.health").joinpath("xid_catalog.csv").read_text(encoding="utf-8")
    return list(csv.DictReader(text.splitlines()))


def test_every_code_nvidia_lists_has_a_rule_with_a_known_action_and_a_source() -> None:
    rows = _rows()
    assert [int(r["xid"]) for r in rows] == list(range(173)), "0 (unidentified) and NVIDIA's 1-172, in order"
    assert all(r["action"] in ACTIONS and r["source"] for r in rows)
    assert {Severity(r["severity"]) for r in rows} == set(Severity)
    for action in ACTIONS:
        assert action in (catalog_module.__doc__ or ""), f"{action} is documented in the module docstring"


@pytest.mark.parametrize(
    ("code", "severity", "action"),
    [
        (13, IGNORE, "app_error"),
        (31, IGNORE, "app_error"),
        (43, IGNORE, "app_error"),
        (45, IGNORE, "app_error"),
        (48, UNHEALTHY, "reset_gpu"),
        (61, SUSPECT, "contact_support"),
        (62, UNHEALTHY, "reset_gpu"),
        (63, SUSPECT, "reset_gpu"),
        (64, UNHEALTHY, "reset_gpu"),
        (74, UNHEALTHY, "check_link"),
        (79, UNHEALTHY, "reboot_node"),
        (92, SUSPECT, "none"),
        (94, SUSPECT, "reset_gpu"),
        (95, UNHEALTHY, "reset_gpu"),
        (109, UNHEALTHY, "reset_gpu"),
        (119, UNHEALTHY, "reset_gpu"),
        (120, UNHEALTHY, "reset_gpu"),
        (121, SUSPECT, "reset_gpu"),
        (140, UNHEALTHY, "reset_gpu"),
        (143, UNHEALTHY, "reset_gpu"),
        (144, SUSPECT, "check_link"),
        (149, SUSPECT, "check_link"),
        (150, UNHEALTHY, "reset_gpu"),
        (154, SUSPECT, "follow_recovery_action"),
    ],
)
def test_the_codes_operators_meet(code: int, severity: Severity, action: str) -> None:
    rule = xid_rule(code)
    assert (rule.severity, rule.action) == (severity, action)


def test_our_severity_follows_nvidias_immediate_action_unless_the_row_says_why() -> None:
    follows = {"RESET_GPU": UNHEALTHY, "RESTART_BM": UNHEALTHY, "RESTART_APP": IGNORE, "IGNORE": IGNORE}
    for row in _rows():
        expected = follows.get(row["nvidia_action"])
        if expected is not None and Severity(row["severity"]) != expected:
            assert row["source"] not in ("", "NVIDIA catalogue"), f"XID {row['xid']} departs without saying why"


def test_a_code_outside_the_catalogue_is_suspect_and_says_so() -> None:
    assert xid_rule(999) == XidRule(SUSPECT, UNKNOWN_ACTION, "Unknown Error")
    assert xid_rule(0).meaning == "an XID the driver could not identify"
    assert xid_rule(79).meaning == "GPU has fallen off the bus", "NVIDIA's words, as the exporter labels them"
    assert len(xid_catalog()) == 173


@pytest.mark.parametrize(
    ("message", "severity", "action"),
    [
        ("Xid 154 GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", UNHEALTHY, "reboot_node"),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", UNHEALTHY, "reset_gpu"),
        ("GPU recovery action changed from 0x0 (None) to 0x4 (Drain and Reset)", UNHEALTHY, "reset_gpu"),
        ("GPU recovery action changed from 0x0 (None) to 0x3 (Drain P2P)", SUSPECT, "follow_recovery_action"),
        ("GPU recovery action changed from 0x2 (Node Reboot Required) to 0x0 (None)", IGNORE, "none"),
    ],
)
def test_xid_154_takes_the_recovery_action_its_message_names(message: str, severity: Severity, action: str) -> None:
    rule = xid_rule(154, message)
    assert (rule.severity, rule.action) == (severity, action)


def test_xid_154_without_a_readable_message_stays_suspect() -> None:
    assert recovery_action(None) is None and recovery_action("to 0x9 (Something New)") is None
    assert xid_rule(154, "garbled").severity == SUSPECT
    assert xid_rule(79, "to 0x0 (None)").severity == UNHEALTHY, "only XID 154's message names an action"
