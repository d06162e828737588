"""What each XID asks of the fleet: a severity and a recommended action, kept as data in xid_catalog.csv.

The source is NVIDIA's Xid catalogue for Ampere and later (docs.nvidia.com/deploy/xid-errors, "Analyzing
Xid Errors with the Xid Catalog"): its "Resolution Bucket (Immediate Action)" is copied into the
`nvidia_action` column, and our severity and action follow from it:

  RESET_GPU, RESTART_BM, RESTART_VM, WORKFLOW_XID_48, WORKFLOW_NVLINK_ERR, CHECK_MECHANICALS -> unhealthy
  RESTART_APP, IGNORE, WORKFLOW_XID_45 -> ignore (recorded, no state change): the GPU stays usable
  CONTACT_SUPPORT on a code the catalogue marks unused on A100 and later, UPDATE_SWFW, CHECK_UVM -> suspect

Where we depart from the bucket, the row's `source` says why (a remap waiting for a reset, XID 63, is
suspect like the remap_pending rule; contained errors, XID 94, ask for a reset when convenient). The
NVLink5 XIDs 144-149 carry their severity in a subcode of the message that gpuscope does not store:
they are suspect, and the fatal ones come with an XID 154 naming the recovery action. XID 154 says in its
message what to do ("... changed from 0x0 (None) to 0x2 (Node Reboot Required)"); `recovery_action`
reads it where an exporter stored the message. A code the catalogue lacks is suspect, "unknown".
The exporter stores an XID the driver could not identify (NVML's 999) as code 0 (core/gpu_events.py).

Actions, the words every health rule uses (health/rules/; ACTIONS below says each in a sentence):
  none, app_error (the application's fault), restart_app, reset_gpu, reboot_node, drain_rma (out of
  service, field diagnostic, return), check_link, check_hardware (seating, power connections),
  check_cooling, run_diagnostics, update_software, contact_support, follow_recovery_action (XID 154),
  drain_p2p and check_imex_domain (the driver's recovery action, health/rules/recovery.py), and
  "unknown: see NVIDIA's catalogue".
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gpuscope.core.gpu_events import UNKNOWN_XID
from gpuscope.core.xid_messages import xid_message
from gpuscope.health.model import Severity

UNKNOWN_ACTION = "unknown: see NVIDIA's catalogue"

# Recommended action -> what an operator does about it.
ACTIONS = {
    "none": "nothing now: recorded, and watched",
    "app_error": "the application's own fault: nothing to do on the node",
    "restart_app": "restart the application; the GPU needs no reset",
    "reset_gpu": "stop the GPU's work and reset it (nvidia-smi -r) or reboot the node",
    "reboot_node": "reboot the node",
    "drain_rma": "take the GPU out of service, run the field diagnostic, return it (RMA)",
    "check_link": "reset to retrain the link; if it recurs, check cable, connector and the peer at its far end",
    "check_hardware": "check the board's seating and its power connections",
    "check_cooling": "check the GPU's cooling: airflow, fans, inlet temperature, heatsink",
    "run_diagnostics": "run a diagnostic on the GPU (DCGM diag level 3, an NCCL test) before trusting it again",
    "update_software": "update the driver and firmware",
    "contact_support": "unexpected on this hardware: collect the logs (nvidia-bug-report.sh) for support",
    "follow_recovery_action": "do what the XID 154 message names (reset, reboot, drain P2P)",
    "drain_p2p": "stop the GPU's processes that use peer-to-peer traffic; the driver then names the next action",
    "check_imex_domain": "recover the IMEX domain (multi-node NVLink) the GPU belongs to; contact support if it recurs",
    UNKNOWN_ACTION: "a code this catalogue lacks: look it up in NVIDIA's",
}

# XID 154's message names the new recovery action in NVML's words (nvmlDeviceGpuRecoveryAction_t).
_RECOVERY = re.compile(r"to\s+0x[0-9a-f]+\s*\(([^)]*)\)", re.IGNORECASE)
_RECOVERY_RULES = {
    "none": (Severity.IGNORE, "none"),
    "drain p2p": (Severity.SUSPECT, "follow_recovery_action"),
    "drain and reset": (Severity.UNHEALTHY, "reset_gpu"),
    "gpu reset required": (Severity.UNHEALTHY, "reset_gpu"),
    "node reboot required": (Severity.UNHEALTHY, "reboot_node"),
}


@dataclass(frozen=True)
class XidRule:
    severity: Severity
    action: str
    meaning: str  # NVIDIA's name for the error ("GPU has fallen off the bus")


@cache
def xid_catalog() -> dict[int, XidRule]:
    text = resources.files("gpuscope.health").joinpath("xid_catalog.csv").read_text(encoding="utf-8")
    return {
        int(row["xid"]): XidRule(Severity(row["severity"]), row["action"], _meaning(int(row["xid"])))
        for row in csv.DictReader(text.splitlines())
    }


def xid_rule(code: int, message: str | None = None) -> XidRule:
    """The rule for an XID; for XID 154 with its message, the recovery action the message names."""
    if code == 154 and (named := recovery_action(message)) is not None:
        return named
    return xid_catalog().get(code) or XidRule(Severity.SUSPECT, UNKNOWN_ACTION, _meaning(code))


def recovery_action(message: str | None) -> XidRule | None:
    """XID 154's "... to 0x2 (Node Reboot Required)" as a rule; None when the message says no known action."""
    found = _RECOVERY.search(message or "")
    if found is None or (rule := _RECOVERY_RULES.get(found.group(1).strip().lower())) is None:
        return None
    return XidRule(rule[0], rule[1], f"GPU recovery action: {found.group(1).strip()}")


def _meaning(code: int) -> str:
    return "an XID the driver could not identify" if code == UNKNOWN_XID else xid_message(code)
