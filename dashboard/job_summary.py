"""A job's page, its efficiency: how well it used what it held, in numbers and in words (GPU-hours, tensor
and SM activity, idle share, energy, peak memory, stragglers), where it ran (each node and GPU linked to
its page), and each GPU's own means, temperature and clock. Its GPU-hours are the job row's, computed once
per read: the page's header shows the same figure (pages/job.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from dash import dcc, html

from gpuscope.collector import query
from gpuscope.collector.query.job_thermals import Thermals
from gpuscope.dashboard import job_gaps
from gpuscope.dashboard.components import BORDER, MUTED, node_href, styled_table
from gpuscope.dashboard.job_data import JobEfficiencyData
from gpuscope.dashboard.job_gaps import gap
from gpuscope.dashboard.job_table import gpu_hours
from gpuscope.dashboard.scales import GIB
from gpuscope.dashboard.uuids import uuid_span
from gpuscope.stragglers.reads import JudgingModel, StragglerRow

TILE = {
    "display": "inline-block",
    "verticalAlign": "top",
    "width": "12em",
    "padding": "0.5em 0.8em",
    "margin": "0 0.6em 0.6em 0",
    "border": f"1px solid {BORDER}",
    "borderRadius": "4px",
}
CELL = {"textAlign": "left"}
ENERGY_SOURCES = {
    "counter": "from the GPUs' energy counters",
    "power": "≈ mean power times time, per minute",
    "mixed": "energy counters, else mean power times time",
}


def efficiency(loaded: JobEfficiencyData, now: datetime | None = None) -> html.Div:
    job, eff = loaded.job, loaded.efficiency
    now = now or datetime.now(UTC)
    usage = job.usage
    active = [s for s in loaded.stragglers if s.ended_at is None]
    tiles = [
        _tile("gpu-hours", gpu_hours(job.gpu_hours), "GPU-hours", _held(job, now)),
        _percent_tile("tensor", "tensor active", usage.mean_tensor_active_pct, job, "tensor cores busy, mean"),
        _percent_tile("sm", "SM active", usage.mean_sm_active_pct, job, "SMs with work, mean"),
        _idle_tile(eff, job),
        _energy_tile(eff, job),
        _memory_tile(eff.peak_memory),
        _straggler_tile(active, loaded.stragglers, loaded.judged),
    ]
    return html.Div(
        [
            html.H3("Efficiency"),
            html.P(_in_words(loaded, now, active), id="job-verdict"),
            html.Div(tiles, id="job-tiles"),
            html.Div("Ran on:", style={"fontWeight": 500}),
            nodes_and_gpus(loaded.gpus),
        ]
    )


def nodes_and_gpus(gpus: list[query.JobGpu]) -> html.Ul:
    """Where it ran: each node, and each of its GPUs there, a link to its page."""
    by_node: dict[str, set[int]] = {}
    for held in gpus:
        by_node.setdefault(held.gpu.node, set()).add(held.gpu.gpu_index)
    items = []
    for node, indexes in by_node.items():
        gpu_links: list[Any] = []
        for index in sorted(indexes):
            gpu_links += [" ", dcc.Link(f"GPU {index}", href=node_href(node, index), className="job-gpu-link")]
        items.append(html.Li([dcc.Link(node, href=node_href(node), className="job-node-link"), ":", *gpu_links]))
    return html.Ul(items, id="job-nodes", style={"margin": "0.2em 0", "columns": "3 24em"})


GPU_HEADER = [
    "node", "GPU", "UUID", "held from (UTC)", "until", "util (%)", "SM active (%)", "tensor active (%)",
    "temperature, mean / max (°C)", "SM clock, mean (MHz)",
]  # fmt: skip
NO_THERMALS = "no temperature or clock in its rolled-up minutes (too recent, or not reported by the GPU)"


def gpu_table(gpus: list[query.JobGpu], thermals: dict[tuple[int, datetime], Thermals] | None = None) -> html.Div:
    """Each GPU the job held with its own means, temperature and clock: a low one, a hot one, a slow one
    is where to look. `thermals`: (GPU id, held from) -> its temperature and clock."""
    reasons: list[str] = []
    rows = [_gpu_row(held, (thermals or {}).get((held.gpu.gpu_id, held.started_at)), reasons) for held in gpus]
    header = GPU_HEADER
    table = styled_table(
        [html.Thead(html.Tr([html.Th(h, style=CELL) for h in header])), html.Tbody(rows)], "job-gpus-table"
    )
    return html.Div([html.H3("Each GPU"), table, job_gaps.legend(reasons)])


def _gpu_row(held: query.JobGpu, heat: Thermals | None, reasons: list[str]) -> html.Tr:
    def value(mean: float | None, metric: str) -> Any:
        if mean is None:
            reason = job_gaps.why_no_usage(held.usage, metric, held.started_at, held.mig is not None)
            reasons.append(reason)
            return gap(reason)
        return f"{mean:.0f}"

    gpu = held.gpu
    label = f"GPU {gpu.gpu_index}" + (f" ({held.mig.profile})" if held.mig else "")
    cells = [
        dcc.Link(gpu.node, href=node_href(gpu.node)),
        dcc.Link(label, href=node_href(gpu.node, gpu.gpu_index)),
        uuid_span(gpu.uuid),
        f"{held.started_at:%Y-%m-%d %H:%M}",
        "running" if held.ended_at is None else f"{held.ended_at:%Y-%m-%d %H:%M}",
        value(held.usage.mean_util_pct, "util"),
        value(held.usage.mean_sm_active_pct, "sm_active"),
        value(held.usage.mean_tensor_active_pct, "tensor"),
        *_thermal_cells(heat, reasons),
    ]
    return html.Tr([html.Td(c, style=CELL) for c in cells])


def _thermal_cells(heat: Thermals | None, reasons: list[str]) -> list[Any]:
    if heat is None or heat.mean_temp_c is None or heat.max_temp_c is None:
        temperature: Any = gap(NO_THERMALS)
        reasons.append(NO_THERMALS)
    else:
        temperature = f"{heat.mean_temp_c:.0f} / {heat.max_temp_c:.0f}"
    if heat is None or heat.mean_sm_clock_mhz is None:
        clock: Any = gap(NO_THERMALS)
        reasons.append(NO_THERMALS)
    else:
        clock = f"{heat.mean_sm_clock_mhz:.0f}"
    return [temperature, clock]


def _tile(key: str, value: Any, label: str, detail: Any) -> html.Div:
    return html.Div(
        [
            html.Div(value, className="tile-value", style={"fontSize": "1.5em", "fontWeight": 600}),
            html.Div(label, className="tile-label", style={"fontWeight": 500}),
            html.Div(detail, className="tile-detail", style={"color": MUTED, "fontSize": "0.85em"}),
        ],
        id=f"job-tile-{key}",
        className="tile",
        style=TILE,
    )


def _held(job: query.JobRow, now: datetime) -> str:
    hours = ((job.ended_at or now) - job.started_at).total_seconds() / 3600
    what = _count(job.gpus, "GPU")
    if job.mig_devices:
        what = f"{_count(job.mig_devices, 'MIG device')} of {what}"
    return f"{what} for {hours:.1f} h" + (" so far" if job.running else "")


def _kwh(joules: float) -> str:
    kwh = joules / 3.6e6
    return f"{kwh:.2f}" if kwh < 10 else f"{kwh:.1f}"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _percent_tile(key: str, label: str, mean: float | None, job: query.JobRow, detail: str) -> html.Div:
    if mean is None:
        metric = {"sm": "sm_active"}.get(key, key)
        reason = job_gaps.why_no_usage(job.usage, metric, job.started_at, job.mig_devices > 0)
        return _tile(key, gap(reason), label, reason)
    return _tile(key, f"{mean:.0f} %", label, detail)


def _idle_tile(eff: query.JobEfficiency, job: query.JobRow) -> html.Div:
    share = eff.idle_share
    label = "idle while allocated"
    if share is None:
        return _tile("idle", gap(job_gaps.TOO_RECENT), label, "no rolled-up minute with activity yet")
    # The share is of the GPU time measured, which trails the GPU-hours held: say so, not a second total.
    detail = html.Span(
        f"{gpu_hours(eff.idle_gpu_hours)} of the {gpu_hours(eff.measured_gpu_hours)} GPU-hours measured were under "
        f"{query.IDLE_BELOW_PCT:.0f}% utilisation",
        title=f"Measured: the rolled-up minutes with a utilisation (or SM activity) reading. Of the "
        f"{gpu_hours(job.gpu_hours)} GPU-hours held, the rest is the newest minutes (rolled up about 3 minutes "
        "after they end) and minutes without a reading.",
        className="idle-measured",
    )
    return _tile("idle", f"{share:.0%}", label, detail)


def _energy_tile(eff: query.JobEfficiency, job: query.JobRow) -> html.Div:
    if eff.energy_j is None:
        if not eff.gpus_without_energy:  # no whole GPU: MIG devices only
            reason = job_gaps.NO_ENERGY_MIG
        elif datetime.now(UTC) - job.started_at < job_gaps.ROLLUP_LAG:
            reason = job_gaps.TOO_RECENT
        else:
            reason = job_gaps.NO_POWER
        return _tile("energy", gap(reason), "energy", reason)
    detail = ENERGY_SOURCES[eff.energy_source]
    if eff.gpus_without_energy:
        detail += f"; {eff.gpus_without_energy} GPUs without readings not counted"
    if job.mig_devices:
        detail += "; MIG devices not counted (their board's power is shared)"
    return _tile("energy", f"{_kwh(eff.energy_j)} kWh", "energy", detail)


def _memory_tile(peak: query.PeakMemory | None) -> html.Div:
    label = "peak memory used"
    if peak is None:
        reason = "no memory readings from its GPUs in its last hour"
        return _tile("memory", gap(reason), label, reason)
    where_ = f"{peak.node} GPU {peak.gpu_index}" + (f" ({peak.mig_profile})" if peak.mig_profile else "")
    of = ""
    if peak.total_bytes:
        of = f" of {peak.total_bytes / GIB:.0f} GiB ({peak.used_bytes / peak.total_bytes:.0%})"
    link = dcc.Link(where_, href=node_href(peak.node, peak.gpu_index))
    return _tile("memory", f"{peak.used_bytes / GIB:.1f} GiB", label, [f"{of.strip()} on ", link, ", in its last hour"])


def _straggler_tile(active: list[StragglerRow], found: list[StragglerRow], judged: JudgingModel | None) -> html.Div:
    if not found:
        if judged is not None and judged.model == "independent":
            return _tile("stragglers", "not judged", "stragglers", judged.words)
        how = f"; {judged.words}" if judged is not None else ""
        return _tile("stragglers", "none", "stragglers", f"the detector found none while it ran{how}")
    shown = active or found
    causes: list[Any] = []
    for s in shown[:3]:
        link = html.Span(s.culprit) if s.node is None else dcc.Link(s.culprit, href=node_href(s.node, s.gpu))
        causes += [html.Br()] if causes else []
        causes += [link, f": {s.cause}, ~{s.slowdown:.0%} slower"]
    value = f"{len(active)} now" if active else "none now"
    label = "straggler now" if len(active) == 1 else "stragglers"
    return _tile("stragglers", value, label, causes if active else ["earlier: ", *causes])


def _in_words(loaded: JobEfficiencyData, now: datetime, active: list[StragglerRow]) -> str:
    job, eff, usage = loaded.job, loaded.efficiency, loaded.job.usage
    words = [f"{_held(job, now)}: {gpu_hours(job.gpu_hours)} GPU-hours."]
    busy = []
    if usage.mean_tensor_active_pct is not None:
        busy.append(f"tensor cores were busy {usage.mean_tensor_active_pct:.0f}% of the time")
    if usage.mean_sm_active_pct is not None:
        busy.append(f"SMs {usage.mean_sm_active_pct:.0f}%")
    if busy:
        sentence = " and ".join(busy)
        words.append(sentence[0].upper() + sentence[1:] + ".")
    if eff.idle_share is not None:
        words.append(
            f"{eff.idle_share:.0%} of its measured GPU time ({gpu_hours(eff.idle_gpu_hours)} GPU-hours) was idle, "
            f"under {query.IDLE_BELOW_PCT:.0f}% utilisation."
        )
    if eff.energy_j is not None:
        words.append(f"Its GPUs drew {_kwh(eff.energy_j)} kWh.")
    if eff.peak_memory is not None:
        peak = eff.peak_memory
        total = f" of {peak.total_bytes / GIB:.0f}" if peak.total_bytes else ""
        words.append(
            f"At most {peak.used_bytes / GIB:.1f}{total} GiB of memory used ({peak.node} GPU {peak.gpu_index})."
        )
    if active:
        culprits = "; ".join(f"{s.culprit}, {s.cause}, ~{s.slowdown:.0%} slower" for s in active)
        words.append(f"Straggling now: {culprits}.")
    return " ".join(words)
