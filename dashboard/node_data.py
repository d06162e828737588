"""What the node page says is wrong with a node, and since when: its jobs, XID errors with what each calls
for, GPU memory (ECC, row remapping), NVLink, InfiniBand ports and energy, loaded in one short read per
refresh, and the findings an operator should act on first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg_pool import ConnectionPool

from gpuscope.collector import query
from gpuscope.dashboard.data import time_range
from gpuscope.exporter.xid_messages import xid_message

NVLINK_MAX_POINTS = 240
XID_ROWS_MAX = 200
SILENT_AFTER = timedelta(minutes=2)  # a GPU with no sample for this long no longer answers
IB_ACTIVE, IB_LINK_UP = 4, 5
# InfiniBand port states as ibstat words them (sysfs: "4: ACTIVE", "5: LinkUp").
IB_STATES = {0: "No change", 1: "Down", 2: "Initializing", 3: "Armed", 4: "Active", 5: "Active (deferred)"}
IB_PHYS_STATES = {
    1: "Sleep",
    2: "Polling",
    3: "Disabled",
    4: "Training",
    5: "LinkUp",
    6: "Link error recovery",
    7: "Phy test",
}

# What an XID calls for, after NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors, "Resolution
# bucket"), for the codes a datacentre sees; True: the GPU or node needs an operator, not the job's owner.
XID_ACTIONS: dict[int, tuple[str, bool]] = {
    0: ("The driver could not identify it: read the kernel log (dmesg) on the node", True),
    8: ("Restart the application; if it recurs, reset the GPU", False),
    13: ("Application fault (out-of-range access): restart it; on several jobs, run dcgmi diag", False),
    31: ("Application fault (illegal memory access): restart it; on several jobs, run dcgmi diag", False),
    32: ("Corrupted command stream (often PCIe): reset the GPU; check the PCIe link if it recurs", True),
    38: ("Driver firmware error: reset the GPU", True),
    43: ("The application was stopped mid-kernel: nothing, unless other XIDs come with it", False),
    45: ("Clean-up after an earlier error: look at the XID before it", False),
    48: ("Uncorrectable ECC error: drain and reset the GPU (row remap)", True),
    61: ("Internal micro-controller warning: reset the GPU if errors follow", True),
    62: ("Internal micro-controller halted: drain and reset the GPU", True),
    63: ("Row remap recorded: reset the GPU when drained to apply it", True),
    64: ("Row remap failed: drain the GPU and have it serviced (RMA)", True),
    74: ("NVLink error: drain and reset the GPU; check the link if it recurs", True),
    79: ("GPU fell off the bus: drain the node and power-cycle it; check power and seating; RMA if repeated", True),
    92: ("High rate of corrected ECC errors: reset the GPU when drained; service if it persists", True),
    94: ("Contained ECC error: only the application using the memory died; reset the GPU when drained", True),
    95: ("Uncontained ECC error: every application on the GPU died; drain and reset the GPU", True),
    109: ("Context-switch timeout: restart the application; reset the GPU if it recurs", False),
    119: ("GSP firmware timeout: drain and reset the GPU; reboot the node if it recurs", True),
    120: ("GSP firmware error: drain and reset the GPU", True),
    121: ("C2C link error: drain and reset the GPU", True),
    140: ("Unrecovered ECC error: drain and reset the GPU", True),
    143: ("GPU failed to initialise: reboot the node; service if it recurs", True),
    144: ("NVLink error: drain and reset the GPU", True),
    145: ("NVLink error: drain and reset the GPU", True),
    149: ("NVLink error: drain and reset the GPU", True),
    150: ("NVLink error: drain and reset the GPU", True),
    154: ("The driver changed the recovery it asks for: follow its message (reset, reboot or drain)", True),
    155: ("NVLink error: drain and reset the GPU", True),
}
UNKNOWN_ACTION = ("Not in our list: see NVIDIA's XID catalogue (docs.nvidia.com/deploy/xid-errors)", True)


@dataclass(frozen=True)
class Xid:
    ts: datetime
    gpu: int | None  # index on the node
    code: int
    count: int
    meaning: str  # NVIDIA's words
    action: str
    hardware: bool  # needs an operator


def xid(event: query.EventRow) -> Xid:
    code = event.code if event.code is not None else 0
    action, hardware = XID_ACTIONS.get(code, UNKNOWN_ACTION)
    meaning = "Unknown XID" if code == 0 else xid_message(code)
    return Xid(event.ts, event.gpu, code, event.count, meaning, action, hardware)


@dataclass(frozen=True)
class NodeHealth:
    window: query.TimeRange
    gpus: list[query.GpuHealth]  # every GPU of the node, by index
    ports: list[query.PortHealth]
    jobs: list[query.NodeJob]  # running first
    xids: list[Xid]  # newest first
    energy: dict[int, query.Energy]  # GPU id ->
    nvlink: query.NvlinkSeries


HEALTH_SPAN = timedelta(hours=24)


def load_node_health(pool: ConnectionPool[Any], node: str, range_key: str) -> NodeHealth | None:
    """None: no GPU or port of that node in the inventory. Over at most the last HEALTH_SPAN of the
    range: the panels read raw samples (the rollups keep no counters), a day of them in a few seconds."""
    window = time_range(range_key)
    window = query.TimeRange(max(window.start, window.end - HEALTH_SPAN), window.end)
    with pool.connection() as conn:
        gpus = query.node_gpus(conn, node)
        ports = query.port_health(conn, node, window)
        if not gpus and not ports:
            return None
        ids = [g.gpu_id for g in gpus]
        bucket = query.fillable_bucket(conn, window, query.bucket_for(window, NVLINK_MAX_POINTS))
        return NodeHealth(
            window,
            query.gpu_health(conn, gpus, window),
            ports,
            query.node_jobs(conn, node, window),
            [xid(e) for e in query.events(conn, window, kinds=("xid",), node=node, limit=XID_ROWS_MAX)],
            query.energy(conn, window, ids),
            query.nvlink_throughput(conn, window, bucket, ids),
        )


Severity = Literal["critical", "warning"]
CHECK_BUS = "Check nvidia-smi on the node; drain it if the GPU fell off the bus"
RMA = "Drain the GPU and have it serviced (RMA)"
RESET_TO_REMAP = "Reset the GPU once it is drained, to apply the remap"
RESET = "Drain and reset the GPU; have it serviced if they recur"
WATCH_LINK = "Watch the link; reset the GPU if they continue"
CHECK_CABLE = "Check the cable, transceiver and switch port"
RESEAT = "Flapping: reseat or replace the cable or transceiver"
CHECK_COUNTERS = "Check the cable and the switch port's counters"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    subject: str  # "GPU 3", "mlx5_1 port 1", "node"
    what: str
    since: datetime | None  # None: before the range
    action: str
    last: datetime | None = None  # the latest occurrence, for what happened more than once


def port_name(port: query.PortRow) -> str:
    return f"{port.device} port {port.port}"


def state_words(state: float | None, phys: float | None) -> str:
    """'Active (LinkUp)', 'Down (Polling)': ibstat's words for the numbers sysfs gives."""
    if state is None:
        return "not reported"
    words = IB_STATES.get(int(state), f"state {state:.0f}")
    return words if phys is None else f"{words} ({IB_PHYS_STATES.get(int(phys), f'physical state {phys:.0f}')})"


def plural(count: float, noun: str) -> str:
    """'1 error', '3 errors', '2 recoveries': a count with its unit."""
    if count != 1:
        noun = noun[:-1] + "ies" if noun.endswith("y") and noun[-2:-1] not in "aeiou" else noun + "s"
    return f"{count:.0f} {noun}"


def findings(health: NodeHealth) -> list[Finding]:
    """What needs an operator on this node, the most severe first, then the newest."""
    found = _gpu_findings(health) + _xid_findings(health.xids) + _port_findings(health.ports)
    newest_first = sorted(found, key=lambda f: f.since.timestamp() if f.since else 0.0, reverse=True)
    return sorted(newest_first, key=lambda f: f.severity != "critical")


def _gpu_findings(health: NodeHealth) -> list[Finding]:
    found = []
    stale = health.window.end - SILENT_AFTER
    silent = [g for g in health.gpus if g.last_seen is None or g.last_seen < stale]
    if silent and len(silent) == len(health.gpus):
        last = max((g.last_seen for g in silent if g.last_seen), default=None)
        found.append(Finding("critical", "node", "no GPU answers", last, "Check the node and its exporter"))
        silent = []
    for g in silent:
        found.append(Finding("critical", f"GPU {g.gpu.gpu_index}", "does not answer", g.last_seen, CHECK_BUS))
    for g in health.gpus:
        name = f"GPU {g.gpu.gpu_index}"
        failed, pending = g.state("remap_failure"), g.state("remap_pending")
        uncorrected, recoveries = g.counter("ecc_uncorrected"), g.counter("nvlink_recovery_errors")
        if failed.latest == 1:
            found.append(Finding("critical", name, "row remapping failed", failed.changed_at, RMA))
        if pending.latest == 1:
            found.append(Finding("warning", name, "row remap pending", pending.changed_at, RESET_TO_REMAP))
        if uncorrected.increase:
            what = plural(uncorrected.increase, "uncorrectable ECC error")
            found.append(Finding("critical", name, what, uncorrected.first_rise, RESET, uncorrected.last_rise))
        if recoveries.increase:
            what = plural(recoveries.increase, "NVLink link recovery")
            found.append(Finding("warning", name, what, recoveries.first_rise, WATCH_LINK, recoveries.last_rise))
    return found


def _xid_findings(xids: list[Xid]) -> list[Finding]:
    """One finding per GPU for its hardware XIDs: which, how many, since the first in the range. An incident
    logs several at once (48, 63, 94 for an ECC error), the cause first: its action is the one shown."""
    by_gpu: dict[int | None, list[Xid]] = {}
    for x in sorted(xids, key=lambda x: (x.ts, x.code)):
        if x.hardware:
            by_gpu.setdefault(x.gpu, []).append(x)
    found = []
    for gpu, seen in by_gpu.items():
        counts: dict[int, int] = {}
        meanings = {x.code: x.meaning for x in seen}
        for x in seen:
            counts[x.code] = counts.get(x.code, 0) + x.count
        codes = ", ".join(f"{code} ({meanings[code]})" + (f" x{n}" if n > 1 else "") for code, n in counts.items())
        what = f"XID{'s' if len(counts) > 1 else ''} {codes}"
        found.append(
            Finding("critical", "node" if gpu is None else f"GPU {gpu}", what, seen[0].ts, seen[0].action, seen[-1].ts)
        )
    return found


PORT_ERRORS = {
    "symbol_errors": "symbol error",
    "rcv_errors": "receive error",
    "link_error_recovery": "link error recovery",
    "xmit_discards": "transmit discard",
}


def _port_findings(ports: list[query.PortHealth]) -> list[Finding]:
    found = []
    for p in ports:
        name, state, phys, downed = port_name(p.port), p.state("state"), p.state("phys_state"), p.counter("link_downed")
        if state.latest is not None and state.latest != IB_ACTIVE:
            what = state_words(state.latest, phys.latest)
            found.append(Finding("critical", name, what, state.changed_at, CHECK_CABLE))
        downs = max(state.departures, int(downed.increase or 0))
        if downs and state.latest == IB_ACTIVE:
            what, last = f"link went down {plural(downs, 'time')}", state.last_departure or downed.last_rise
            found.append(Finding("warning", name, what, downed.first_rise or last, RESEAT, last))
        errors = [(label, p.counter(key)) for key, label in PORT_ERRORS.items() if p.counter(key).increase]
        if errors:
            what = ", ".join(plural(use.increase or 0, label) for label, use in errors)
            first = min((use.first_rise for _, use in errors if use.first_rise), default=None)
            last = max((use.last_rise for _, use in errors if use.last_rise), default=None)
            found.append(Finding("warning", name, what, first, CHECK_COUNTERS, last))
    return found
