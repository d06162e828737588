"""What the node page says is wrong with a node, and since when: its jobs, XID errors with what each calls
for, GPU memory (ECC, row remapping), NVLink, InfiniBand ports, energy, clock slowdowns, temperatures,
stragglers and GPUs a job holds idle, loaded in one short read per refresh, and the findings an operator
should act on first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from psycopg_pool import ConnectionPool

from gpuscope.collector import query
from gpuscope.collector.query import buckets
from gpuscope.collector.query.idle_gpus import IdleGpu, idle_gpus
from gpuscope.core.clock_reasons import reason_words
from gpuscope.core.xid_messages import xid_message
from gpuscope.dashboard.data import time_range
from gpuscope.dashboard.job_view import IDLE_WORDS
from gpuscope.stragglers import reads as straggler_reads

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
# The reasons that hold a GPU below the clocks it was asked for because of its heat or its power supply:
# an operator's to fix. Idle, caps and clock settings are the workload's or someone's choice.
THERMAL_SLOWDOWNS = 0x20 | 0x40
HW_POWER_BRAKE = 0x80
SLOWDOWNS = 0x8 | THERMAL_SLOWDOWNS | HW_POWER_BRAKE
OVER_TEMPERATURE_C = 85.0  # alerts/default_rules.yaml GpuOverTemperature: the page and the alert agree

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
    throttling: dict[int, query.Throttling] = field(default_factory=dict)  # GPU id ->
    stragglers: list[straggler_reads.StragglerRow] = field(default_factory=list)  # active now, on this node
    idle: list[IdleGpu] = field(default_factory=list)  # GPUs of this node a running job holds idle now


HEALTH_SPAN = timedelta(hours=24)
# A GPU may assert a slowdown in only some of its samples (the reason comes and goes with the load): in
# buckets of at least a minute, such a slowdown reads as one run, and "since" as when it began.
SLOWDOWN_BUCKET_S = 60


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
        bucket = buckets.chart_bucket(conn, window, NVLINK_MAX_POINTS)  # raw samples: NVLink has no rollup
        return NodeHealth(
            window,
            query.gpu_health(conn, gpus, window),
            ports,
            query.node_jobs(conn, node, window),
            [xid(e) for e in query.events(conn, window, kinds=("xid",), node=node, limit=XID_ROWS_MAX)],
            query.energy(conn, window, ids),
            query.nvlink_throughput(conn, window, bucket, ids),
            throttling=query.throttling(conn, ids, window, max(bucket, SLOWDOWN_BUCKET_S)),
            # The detector's stragglers are few (one per slowed job at most): pick this node's here.
            stragglers=[s for s in straggler_reads.stragglers(conn, window, active_only=True) if s.node == node],
            idle=idle_gpus(conn, node=node, since_from=window.start),
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
COOL = "Check the node's cooling and fans: the GPU is too hot to run at full clocks"
COOL_DOWN = "Check the node's cooling and fans: near 90 °C the GPU slows itself down"
CHECK_POWER = "Power brake: check the node's power supplies and power delivery"
COOL_OR_POWER = "Check the node's cooling and power supplies (HW slowdown: too hot, or a power brake)"
WAITS = "The whole job waits for it"
STRAGGLER_ACTIONS = {
    "thermal": f"{WAITS}: cool the GPU (fans, airflow) or drain it and restart the job without it",
    "power_cap": f"{WAITS}: check the GPU's power limit (nvidia-smi -q -d POWER)",
    "slow_nic": f"{WAITS}: check the cable, transceiver and switch port",
    "slow_host": f"{WAITS}: check the node's CPUs, storage and data loading",
}
UNKNOWN_STRAGGLER = f"{WAITS}: compare it with its peers on the job's page"
RELEASE = "Ask its owner whether the job still needs them; if not, release them for other work"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    subject: str  # "GPU 3", "mlx5_1 port 1", "node"
    what: str
    since: datetime | None  # None: before the range
    action: str
    last: datetime | None = None  # the latest occurrence, for what happened more than once
    job_id: str | None = None  # the job it concerns, linked from the finding


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
    found = _gpu_findings(health) + _slowdown_findings(health) + _straggler_findings(health.stragglers)
    found += _xid_findings(health.xids) + _port_findings(health.ports) + _idle_findings(health.idle)
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


def _slowdown_findings(health: NodeHealth) -> list[Finding]:
    """GPUs held below full clocks by heat or power, or too hot, in the newest bucket they reported."""
    found = []
    stale = health.window.end - SILENT_AFTER
    for g in health.gpus:
        seen = health.throttling.get(g.gpu.gpu_id)
        if seen is None or g.last_seen is None or g.last_seen < stale:
            continue  # a silent GPU is a finding of its own: what it said last is not what it does now
        name, start = f"GPU {g.gpu.gpu_index}", health.window.start
        slowed = (newest(seen.reasons) or 0) & SLOWDOWNS
        if slowed:
            hits = [None if r is None else bool(r & slowed) for r in seen.reasons]
            what = "clocks held down: " + ", ".join(reason_words(slowed))
            found.append(Finding("warning", name, what, run_start(seen.times, hits, start), slowdown_action(slowed)))
        temp = newest(seen.temp_c)
        if temp is not None and temp >= OVER_TEMPERATURE_C:
            hits = [None if t is None else t >= OVER_TEMPERATURE_C for t in seen.temp_c]
            what = f"{temp:.0f} °C, at or above the {OVER_TEMPERATURE_C:.0f} °C alert threshold"
            found.append(Finding("warning", name, what, run_start(seen.times, hits, start), COOL_DOWN))
    return found


def slowdown_action(slowed: int) -> str:
    if slowed & THERMAL_SLOWDOWNS:
        return COOL
    return CHECK_POWER if slowed & HW_POWER_BRAKE else COOL_OR_POWER


Reported = TypeVar("Reported")


def newest(values: Sequence[Reported | None]) -> Reported | None:
    """The newest value reported, from oldest-first buckets."""
    return next((v for v in reversed(values) if v is not None), None)


def run_start(times: Sequence[datetime], hits: Sequence[bool | None], start: datetime) -> datetime | None:
    """The first bucket of the unbroken run of hits that ends in the newest reported bucket (a hit);
    None: the run reaches the range's start, so it began before. A bucket that reported nothing says
    nothing either way: it neither breaks the run nor extends it."""
    first = None
    for t, hit in zip(reversed(times), reversed(hits), strict=True):
        if hit is None:
            continue
        if not hit:
            break
        first = t
    return None if first is None or first <= start else first


def _straggler_findings(stragglers: list[straggler_reads.StragglerRow]) -> list[Finding]:
    """What the straggler detector flags now: every rank of the job waits for this GPU, port or node."""
    found = []
    for s in stragglers:
        what = f"straggler of job {s.job_id}: {s.cause}, ~{s.slowdown:.0%} slower"
        action = STRAGGLER_ACTIONS.get(s.cause, UNKNOWN_STRAGGLER)
        found.append(Finding("warning", straggler_subject(s), what, s.started_at, action, job_id=s.job_id))
    return found


def straggler_subject(s: straggler_reads.StragglerRow) -> str:
    """Named as the node's other findings name it: "GPU 2", "mlx5_3 port 1", "node"."""
    if s.gpu is not None:
        return f"GPU {s.gpu}"
    return "node" if s.nic is None else f"{s.nic} port {s.port}"


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


def _idle_findings(idle: list[IdleGpu]) -> list[Finding]:
    """One finding per job holding GPUs of the node idle: which GPUs, since when (the earliest of them)."""
    by_job: dict[str, list[IdleGpu]] = {}
    for gpu in idle:
        by_job.setdefault(gpu.job_id, []).append(gpu)
    found = []
    for job_id, gpus in by_job.items():
        numbers = [g.gpu_index for g in gpus]
        subject = f"GPU{'s' if len(numbers) > 1 else ''} {indices(numbers)}"
        owner = f" ({gpus[0].user})" if gpus[0].user else ""
        starts = [g.idle_since for g in gpus]
        since = None if None in starts else min(s for s in starts if s is not None)
        what = f"held idle by job {job_id}{owner}: {IDLE_WORDS}"
        found.append(Finding("warning", subject, what, since, RELEASE, job_id=job_id))
    return found


def indices(values: Sequence[int]) -> str:
    """GPU indices as runs: [0, 1, 2, 3, 6] -> '0-3, 6'."""
    runs: list[list[int]] = []
    for i in sorted(values):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ", ".join(map(str, r)) for r in runs) or "-"


def node_known(pool: ConnectionPool[Any], node: str) -> bool:
    """Whether any GPU or InfiniBand port of `node` is in the inventory: its page has something to show."""
    with pool.connection() as conn:
        return bool(query.select_gpus(conn, node=node) or query.select_ports(conn, nodes=[node]))
