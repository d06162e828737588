"""The node page's health panels, as pure functions of what node_data loaded (tests call them directly):
findings first, then jobs, XIDs, GPU memory, InfiniBand, NVLink and energy. Every number carries its
unit; rows that need an operator are coloured (class row-critical or row-warning) so they stand out."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import dash_mantine_components as dmc
import numpy as np
import plotly.graph_objects as go
from dash import dcc, html

from gpuscope.collector import query
from gpuscope.collector.query.arrays import nan_to_none
from gpuscope.dashboard.components import MUTED, ago, banner, job_href, styled_table
from gpuscope.dashboard.figures import message_figure, plain
from gpuscope.dashboard.node_colours import gpu_line
from gpuscope.dashboard.node_data import (
    IB_ACTIVE,
    OVER_TEMPERATURE_C,
    Finding,
    NodeHealth,
    Xid,
    indices,
    plural,
    port_name,
    state_words,
)

Kind = str | None  # "critical", "warning" or None: how a row stands out
ROW_COLOURS = {"critical": "var(--mantine-color-red-light)", "warning": "var(--mantine-color-yellow-light)"}
FINDING_COLOURS = {"critical": "var(--mantine-color-red-text)", "warning": "var(--mantine-color-orange-text)"}
CELL = {"textAlign": "left", "verticalAlign": "top"}
NOTE = {"color": MUTED, "fontSize": "0.9em"}
GB = 1e9


def utc(ts: datetime) -> str:
    return f"{ts.astimezone(UTC):%Y-%m-%d %H:%M:%S}"


def since(ts: datetime | None) -> str:
    return "since before this range" if ts is None else f"since {utc(ts)} UTC ({ago(ts)})"


def rows_table(
    headers: Sequence[str], rows: Sequence[tuple[Sequence[Any], Kind]], id: str, wrap: Sequence[int] = ()
) -> dmc.Table:
    """A table whose rows may stand out: each row comes with its kind. Cells stay on one line but in the
    `wrap` columns (long text: meanings, actions)."""
    styles = [CELL if i in wrap else {**CELL, "whiteSpace": "nowrap"} for i in range(len(headers))]
    body = [
        html.Tr(
            [html.Td(cell, style=style) for cell, style in zip(cells, styles, strict=True)],
            className=f"row-{kind}" if kind else "row",
            style={"background": ROW_COLOURS[kind]} if kind else {},
        )
        for cells, kind in rows
    ]
    return styled_table([html.Thead(html.Tr([html.Th(h, style=CELL) for h in headers])), html.Tbody(body)], id)


def findings_panel(found: list[Finding]) -> html.Div:
    """One box per GPU, port or the node, the most severe first; in each, what is wrong, since when, and
    what to do."""
    if not found:
        return banner(
            "Nothing needs an operator in this range: no hardware XID, no uncorrectable ECC error, no pending or "
            "failed row remap, every InfiniBand port Active without errors, every GPU answering, none held down "
            f"by heat or power or at {OVER_TEMPERATURE_C:.0f} °C and above, no straggler, no GPU held idle by a job.",
            "info",
        )
    by_subject: dict[str, list[Finding]] = {}
    for f in found:
        by_subject.setdefault(f.subject, []).append(f)
    boxes = []
    for subject, items in by_subject.items():
        worst = "critical" if any(f.severity == "critical" for f in items) else "warning"
        lines = [
            html.Li(
                [html.Strong(f.what), f" {when(f)}", *job_link(f), html.Br(), html.Span(f.action, style=NOTE)],
                className=f"finding finding-{f.severity}",
                style={"margin": "0.15em 0"},
            )
            for f in items
        ]
        boxes.append(
            html.Div(
                [html.Strong(subject), html.Ul(lines, style={"margin": "0.2em 0", "paddingLeft": "1.2em"})],
                className=f"findings-of findings-{worst}",
                style={
                    "borderLeft": f"4px solid {FINDING_COLOURS[worst]}",
                    "background": ROW_COLOURS[worst],
                    "padding": "0.3em 0.8em",
                    "margin": "0.35em 0",
                },
            )
        )
    return html.Div(boxes, id="node-findings-list")


def job_link(f: Finding) -> list[Any]:
    return [" · ", dcc.Link(f"job {f.job_id}", href=job_href(f.job_id), className="finding-job")] if f.job_id else []


def when(f: Finding) -> str:
    last = f", last at {utc(f.last)} UTC" if f.last and f.last != f.since else ""
    return since(f.since) + last


def jobs_panel(jobs: list[query.NodeJob]) -> html.Div | dmc.Table:
    if not jobs:
        return banner("No job held this node's GPUs in this range.", "empty")
    rows = []
    for job in jobs:
        owner = job.user or "-"
        if job.namespace:
            owner = f"{job.namespace} · {job.workload or '-'}"
        state = "running" if job.running else f"ended {utc(job.ended_at)} UTC" if job.ended_at else "ended"
        gpus = indices(job.gpus_now if job.running else job.gpus)
        link = dcc.Link(job.job_id, href=f"/jobs/{quote(job.job_id, safe='')}")
        rows.append(([link, owner, state, f"{utc(job.started_at)} UTC ({ago(job.started_at)})", gpus], None))
    return rows_table(["job", "user", "state", "on this node since", "GPUs"], rows, "node-jobs-table")


def xid_panel(xids: list[Xid]) -> html.Div | dmc.Table:
    if not xids:
        return banner("No XID errors in this range.", "empty")
    rows = [
        (
            [utc(x.ts), "node" if x.gpu is None else x.gpu, x.code, x.count, x.meaning, x.action],
            "critical" if x.hardware else None,
        )
        for x in xids
    ]
    headers = ["time (UTC)", "GPU", "XID", "count", "meaning (NVIDIA)", "what to do"]
    return rows_table(headers, rows, "node-xid-table", wrap=(4, 5))


def counted(use: query.CounterUse, noun: str) -> str:
    """A counter as its increase in the range and its total: '3 errors in range, 13 total', 'none in range,
    13 total', '0 errors'; 'not reported' for a field the GPU or port does not report."""
    if use.latest is None and use.increase is None:
        return "not reported"
    total = f", {use.latest:.0f} total" if use.latest is not None else ""
    if use.increase:
        return f"{plural(use.increase, noun)} in range{total}"
    return plural(0, noun) if not use.latest else f"none in range{total}"


def memory_panel(gpus: list[query.GpuHealth]) -> html.Div | dmc.Table:
    if not gpus:
        return banner("No GPUs on this node.", "empty")
    rows = []
    for g in gpus:
        pending, failed = g.state("remap_pending"), g.state("remap_failure")
        uncorrected = g.counter("ecc_uncorrected")
        action, kind = "-", None
        if pending.latest == 1:
            action, kind = "reset the GPU when drained (remap pending)", "warning"
        if failed.latest == 1 or uncorrected.increase:
            action = "drain and service (RMA)" if failed.latest == 1 else "drain and reset the GPU"
            kind = "critical"
        rows.append(
            (
                [
                    f"GPU {g.gpu.gpu_index}",
                    counted(g.counter("ecc_corrected"), "error"),
                    counted(uncorrected, "error"),
                    counted(g.counter("remapped_rows_correctable"), "row"),
                    counted(g.counter("remapped_rows_uncorrectable"), "row"),
                    flag(pending),
                    flag(failed),
                    action,
                ],
                kind,
            )
        )
    headers = [
        "GPU",
        "corrected ECC",
        "uncorrectable ECC",
        "rows remapped (correctable)",
        "rows remapped (uncorrectable)",
        "remap pending",
        "remap failed",
        "action",
    ]
    return rows_table(headers, rows, "node-memory-table", wrap=(5, 7))


def flag(state: query.StateUse) -> str:
    if state.latest is None:
        return "not reported"
    return f"yes, {since(state.changed_at)}" if state.latest == 1 else "no"


PORT_NOUNS = {
    "symbol_errors": "error",
    "rcv_errors": "error",
    "link_error_recovery": "recovery",
    "xmit_discards": "packet",
}


def ib_panel(ports: list[query.PortHealth]) -> html.Div | dmc.Table:
    if not ports:
        return banner("No InfiniBand ports on this node.", "empty")
    rows = []
    for p in ports:
        state, phys, rate = p.state("state"), p.state("phys_state"), p.state("rate_gbps")
        downed = p.counter("link_downed")
        errors = [(p.counter(k), noun) for k, noun in PORT_NOUNS.items()]
        kind: Kind = None
        if state.departures or downed.increase or any(e.increase for e, _ in errors):
            kind = "warning"
        if state.latest is not None and state.latest != IB_ACTIVE:
            kind = "critical"
        rate_text = "not reported" if rate.latest is None else f"{rate.latest:g} Gbit/s"
        if rate.changed_at is not None:
            rate_text += f" (changed {utc(rate.changed_at)} UTC)"
        rows.append(
            (
                [
                    port_name(p.port),
                    state_words(state.latest, phys.latest)
                    + (", the whole range" if state.changed_at is None else f" {since(state.changed_at)}"),
                    rate_text,
                    counted(downed, "time"),
                    *(counted(e, noun) for e, noun in errors),
                    ago(p.last_seen),
                ],
                kind,
            )
        )
    headers = [
        "port",
        "link state (physical)",
        "rate",
        "link down",
        "symbol errors",
        "receive errors",
        "link error recoveries",
        "transmit discards",
        "last sample",
    ]
    return rows_table(headers, rows, "node-ib-table", wrap=(1, 2, 4, 5, 6, 7))


def nvlink_panel(gpus: list[query.GpuHealth], series: query.NvlinkSeries) -> dmc.Table:
    rows: list[tuple[Sequence[Any], Kind]] = []
    for g in gpus:
        name = f"GPU {g.gpu.gpu_index}"
        if not (g.has_nvlink or series.reported(g.gpu.gpu_id)):
            rows.append(([name, "no NVLink reported", "", "", "", ""], None))
            continue
        i = series.gpu_ids.index(g.gpu.gpu_id)
        traffic = series.tx[i] + series.rx[i]
        seen = traffic[np.isfinite(traffic)]
        now = f"{seen[-1] / GB:.1f} GB/s" if seen.size else "not reported"
        mean = f"{seen.mean() / GB:.1f} GB/s" if seen.size else "not reported"
        crc, replay, recovery = (
            g.counter(k) for k in ("nvlink_crc_errors", "nvlink_replay_errors", "nvlink_recovery_errors")
        )
        kind: Kind = "warning" if recovery.increase or crc.increase or replay.increase else None
        rows.append(
            (
                [name, now, mean, counted(crc, "error"), counted(replay, "replay"), counted(recovery, "recovery")],
                kind,
            )
        )
    headers = ["GPU", "traffic now (tx + rx)", "mean over range", "CRC errors", "replays", "link recoveries"]
    return rows_table(headers, rows, "node-nvlink-table")


def nvlink_figure(gpus: list[query.GpuHealth], series: query.NvlinkSeries, revision: str) -> go.Figure:
    """Each GPU's NVLink traffic (transmitted + received over all its links) over time, GB/s."""
    traces = []
    for g in gpus:
        i = series.gpu_ids.index(g.gpu.gpu_id)
        if not series.reported(g.gpu.gpu_id):
            continue
        name = f"gpu{g.gpu.gpu_index}"
        traces.append(
            {
                "type": "scatter",
                "mode": "lines",
                "x": series.times,
                "name": name,
                "line": gpu_line(g.gpu.gpu_index),  # as on the page's other charts, whichever GPUs are drawn
                "y": nan_to_none((series.tx[i] + series.rx[i]) / GB),
                "hovertemplate": f"{plain(name)}<br>%{{x}}<br>%{{y:.1f}} GB/s<extra></extra>",
            }
        )
    if not traces:
        return message_figure("No NVLink reported by this node's GPUs.")
    layout = {
        "title": {"text": f"NVLink traffic per GPU, transmitted + received (GB/s), {series.bucket_s} s buckets"},
        "yaxis": {"title": {"text": "GB/s"}, "rangemode": "tozero"},
        "height": 300,
        "margin": {"l": 60, "r": 20, "t": 50, "b": 30},
        "uirevision": revision,
    }
    return go.Figure({"data": traces, "layout": layout})


def kwh(value: float) -> str:
    return f"{value:.3f} kWh" if value < 10 else f"{value:.1f} kWh"


def energy_panel(health: NodeHealth) -> html.Div | dmc.Table:
    if not health.gpus:
        return banner("No GPUs on this node.", "empty")
    minutes = health.window.seconds / 60
    rows: list[tuple[Sequence[Any], Kind]] = []
    total_kwh, total_w = 0.0, 0.0
    for g in health.gpus:
        used = health.energy.get(g.gpu.gpu_id)
        if used is None:
            rows.append(([f"GPU {g.gpu.gpu_index}", "not reported", "", "", ""], None))
            continue
        total_kwh += used.kwh
        total_w += used.mean_power_w or 0.0
        restarts = f"{used.restarts} (counter restarted)" if used.restarts else "0"
        power = "-" if used.mean_power_w is None else f"{used.mean_power_w:.0f} W"
        rows.append(
            (
                [
                    f"GPU {g.gpu.gpu_index}",
                    kwh(used.kwh),
                    power,
                    f"{used.seconds / 60:.0f} of {minutes:.0f} min",
                    restarts,
                ],
                None,
            )
        )
    if health.energy:
        rows.append(
            (
                [
                    html.Strong("node (GPUs)"),
                    html.Strong(kwh(total_kwh)),
                    html.Strong(f"{total_w:.0f} W"),
                    "",
                    "",
                ],
                None,
            )
        )
    headers = ["GPU", "energy", "mean power", "reported for", "counter restarts"]
    return html.Div(
        [
            rows_table(headers, rows, "node-energy-table"),
            html.Span("GPU boards only, from their energy counters (not the whole server's draw).", style=NOTE),
        ]
    )
