"""Fleet overview (/): what the GPUs are doing (working, idle in a job, free, unhealthy), how hard the
working ones work, stragglers, energy, alerts; then what needs attention first, each item a link to
its cause; an activity heatmap and power per rack below."""

from __future__ import annotations

import logging
from typing import Any

import dash_mantine_components as dmc
import flask
from dash import Dash, Input, Output, State, dcc, html

from gpuscope.dashboard import data, prefetch, time_ranges
from gpuscope.dashboard.alert_groups import Cause, Concern, concerns
from gpuscope.dashboard.components import (
    MUTED,
    address_for,
    ago,
    badge,
    banner,
    guarded,
    job_href,
    node_href,
    nothing,
    query_params,
    query_string,
    rack_href,
)
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import heatmap_figure, message_figure, rack_power_figure

TITLE = "Overview"

log = logging.getLogger(__name__)


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname in ("", "/") else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    """The page with its figures and numbers already in it: drawn from the router's response, not from a
    second round trip after it, and each graph drawn once, with its data (an empty dcc.Graph is drawn and
    resized twice before a callback fills it, which cost a cold first visit more than its queries). The
    refresh callback takes over from the first tick of the timer or a change of range."""
    range_key = _valid(query_params(search).get("range", DEFAULT_RANGE))
    try:
        status, summary, attention, heatmap, power = prefetch.taken(_PREFETCH, range_key) or contents(ctx, range_key)
    except Exception:  # a bug, not the database (contents() answers that): the page all the same, and
        # the timer's refresh tries again, as it did when the contents came by callback alone
        log.exception("dashboard: the overview's contents failed")
        status, summary, attention, heatmap, power = unreachable("The overview could not be loaded (see the log).")
    return html.Div(
        [
            html.H2("Cluster overview"),
            html.Div(status, id="overview-status"),
            html.Div(summary, id="fleet-summary", className="output summary"),
            html.H3("Needs attention"),
            html.Div(attention, id="attention", className="output"),
            time_ranges.picker("range", range_key),
            dcc.Graph(id="util-heatmap", figure=heatmap, config={"displaylogo": False}),
            dcc.Graph(id="rack-power", figure=power, config={"displaylogo": False}),
        ]
    )


def unreachable(message: str) -> tuple[Any, ...]:
    return banner(message, "error"), nothing(), nothing(), message_figure(message), message_figure(message)


def contents(ctx: Context, range_key: str) -> tuple[Any, ...]:
    """What the page shows for `range_key`: status, headline, attention list, heatmap, rack power."""
    return _contents(ctx, _valid(range_key))


@guarded(unreachable)
def _contents(ctx: Context, range_key: str) -> tuple[Any, ...]:
    overview = data.load_overview(ctx.pool, range_key, ctx.options.rack_budgets_kw)
    status: Any = [] if overview.summary.gpus_known else banner("No data yet: no exporter has reported.", "empty")
    return (
        status,
        headline(overview, len(overview.attention.alerts), range_key),
        attention_list(overview.attention),
        heatmap_figure(overview.heatmap, revision=f"overview-{range_key}", height=420),
        rack_power_figure(overview.rack_power, revision=f"overview-{range_key}"),
    )


_PREFETCH = "gpuscope_overview"  # the overview's prefetch, by name in the Flask app (dashboard/prefetch.py)


def prefetch_on_page_request(app: Dash, ctx: Context) -> None:
    """Load the overview's contents from the moment a browser asks for its HTML (dashboard/prefetch.py), for
    the default range or a preset (a range typed into the address is loaded by layout() itself)."""

    def key_of(request: flask.Request) -> str | None:
        if match(request.path) is None:
            return None
        range_key = request.args.get("range", DEFAULT_RANGE)
        return range_key if range_key in time_ranges.PRESETS_S else None

    prefetch.install(app.server, _PREFETCH, prefetch.Prefetch(lambda range_key: contents(ctx, range_key)), key_of)


def register(app: Dash, ctx: Context) -> None:
    time_ranges.register(app, "range")
    _share(app)

    @app.callback(
        Output("overview-status", "children"),
        Output("fleet-summary", "children"),
        Output("attention", "children"),
        Output("util-heatmap", "figure"),
        Output("rack-power", "figure"),
        Input("refresh", "n_intervals"),
        Input("range", "value"),
        prevent_initial_call=True,  # the layout comes filled (layout())
    )
    def refresh(_: int | None, range_key: str) -> tuple[Any, ...]:
        return contents(ctx, range_key)


def _share(app: Dash) -> None:
    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("range", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(range_key: str, search: str | None) -> Any:
        return address_for(search, {"range": range_key}, {"range": DEFAULT_RANGE})


DEFAULT_RANGE = "1h"
STATES = (  # id, label, colour, what it means
    ("working", "working", "#2e7d32", "in a job and active"),
    ("idle", "idle in a job", "#f9a825", "allocated, under 5% activity: wasted"),
    ("free", "free", "#90a4ae", "in no job"),
    ("unhealthy", "unhealthy", "#c62828", "silent, down, row remap pending or failed, or a critical XID"),
)


def headline(overview: data.OverviewData, firing: int, range_key: str) -> list[Any]:
    """What the GPUs are doing as one bar, then the numbers an operator acts on, each linked to its page."""
    summary = overview.summary
    counts = {
        "working": summary.gpus_working,
        "idle": summary.gpus_idle_in_job,
        "free": summary.gpus_free,
        "unhealthy": summary.gpus_unhealthy,
    }
    total = max(summary.gpus_known, 1)
    bar = html.Div(
        [
            html.Div(
                title=f"{counts[key]} {label}: {meaning}",
                style={"width": f"{100 * counts[key] / total:.2f}%", "background": colour, "height": "100%"},
            )
            for key, label, colour, meaning in STATES
            if counts[key]
        ],
        id="gpu-state-bar",
        style={"display": "flex", "height": "14px", "borderRadius": "3px", "overflow": "hidden", "margin": "0.3em 0"},
    )
    legend = [
        html.Span(
            _state_link(key, [html.Span(f"{counts[key]}", className="state-count"), f" {label}"], overview),
            id=f"gpus-{key}",
            title=meaning,
            className="state",
            style={"marginRight": "1.2em", "borderLeft": f"0.8em solid {colour}", "paddingLeft": "0.4em"},
        )
        for key, label, colour, meaning in STATES
    ]
    legend.append(html.Span(f"of {summary.gpus_known} GPUs", style={"color": MUTED}))
    stragglers = len(overview.attention.stragglers)
    cards = [
        _card("activity", "activity of working GPUs", _activity(summary), "SM activity (tensor cores)"),
        _card(
            "stragglers",
            "stragglers",
            str(stragglers),
            "jobs slowed by one of their GPUs, NICs or hosts",
            "/jobs?straggler=1",
        ),
        _card("energy", f"energy, {_range_words(range_key)}", _energy(overview.energy_kwh, summary.total_power_w), ""),
        _card("running-jobs", "running jobs", str(summary.running_jobs), "", "/jobs"),
        _card("firing-alerts", "firing alerts", str(firing), "", "/alerts"),
        _card(
            "gpus-reporting",
            "GPUs reporting",
            f"{summary.gpus_reporting} / {summary.gpus_known}",
            f"mean utilisation {_pct(summary.mean_util_pct)}: busy-waiting counts as busy",
        ),
    ]
    return [html.Div(legend, className="states"), bar, html.Div(cards, className="cards")]


def _state_link(key: str, text: list[Any], overview: data.OverviewData) -> Any:
    """GPUs idle in a job lead to the job holding them, or to the jobs holding idle GPUs when several do."""
    if key != "idle" or not overview.idle_jobs:
        return text
    jobs = overview.idle_jobs
    href = job_href(jobs[0]) if len(jobs) == 1 else "/jobs" + query_string({"idle": 1})
    return dcc.Link(text, href=href, id="gpus-idle-link")


def _card(key: str, label: str, value: str, note: str, href: str | None = None) -> html.Div:
    body = [html.Div(label, className="card-label"), html.Div(value, className="card-value", id=f"{key}-value")]
    if note:
        body.append(html.Div(note, className="card-note"))
    content: Any = dcc.Link(body, href=href, className="card-link") if href else body
    return dmc.Paper(content, id=key, className="card", withBorder=True, radius="md")


def _activity(summary: Any) -> str:
    if summary.mean_sm_active_pct is None:
        return "n/a"
    tensor = "" if summary.mean_tensor_active_pct is None else f" ({summary.mean_tensor_active_pct:.0f}%)"
    return f"{summary.mean_sm_active_pct:.0f}%{tensor}"


def _energy(kwh: float | None, power_w: float | None) -> str:
    energy = "n/a" if kwh is None else (f"{kwh / 1000:.2f} MWh" if kwh >= 10_000 else f"{kwh:,.0f} kWh")
    now = "" if power_w is None else f", now {power_w / 1000:.1f} kW"
    return energy + now


def _range_words(range_key: str) -> str:
    return f"last {range_key}" if range_key in time_ranges.PRESETS_S else time_ranges.label(range_key)


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}%"


ATTENTION_LINES = 12


def attention_list(attention: data.Attention) -> Any:
    """One line per job, node or rack with something wrong (dashboard/alert_groups.py), most severe first."""
    lines = concerns(attention.alerts, attention.stragglers, attention.unhealthy, attention.racks_near_budget)
    items: list[Any] = [_concern_item(line) for line in lines[:ATTENTION_LINES]]
    if len(lines) > ATTENTION_LINES:
        items.append(html.Li(dcc.Link(f"... and {len(lines) - ATTENTION_LINES} more", href="/alerts")))
    if attention.gpus_silent > 0:
        items.append(html.Li([badge("warning"), f" {attention.gpus_silent} GPUs have not reported in 2 minutes"]))
    if not items:
        return banner("Nothing needs attention: no firing alerts, no stragglers, every GPU reporting.", "empty")
    return html.Ul(items, id="attention-list")


def _concern_item(line: Concern) -> html.Li:
    """severity, who (linked), the worst cause, "+N more" leading to the rest, when the worst began."""
    parts: list[Any] = [badge(line.severity), " ", *_subject(line), *_cause(line, line.head)]
    if line.rest:
        others = "\n".join(_cause_words(cause) for cause in line.causes[1:])
        more = dcc.Link(f"+{line.rest} more", href=line.alerts_href(), title=others, className="attention-more")
        parts += [" · ", more]
    if line.head.since is not None:
        parts.append(html.Span(f" · started {ago(line.head.since)}", style={"color": MUTED}))
    return html.Li(parts, className=f"attention-{line.kind}")


def _subject(line: Concern) -> list[Any]:
    if line.kind == "job":
        owner = f" ({line.owner})" if line.owner else ""
        return [dcc.Link(f"job {line.key}", href=job_href(line.key)), owner, ": "]
    if line.kind == "node":
        return [dcc.Link(line.key, href=node_href(line.key)), ": "]
    if line.kind == "rack":
        return [dcc.Link(line.key, href=rack_href(line.key)), " "]
    return []


def _cause(line: Concern, cause: Cause) -> list[Any]:
    item = cause.item
    if cause.alerts:
        name = html.Strong(cause.name)
        many = len(cause.alerts)
        if many > 1 and len(cause.gpus) == many:  # one alert per GPU: say how many GPUs, not one of them
            nodes = sorted({a.labels.get("node", "") for a in cause.alerts} - {""})
            where = f" of {nodes[0]}" if len(nodes) == 1 and line.kind != "node" else ""
            return [name, f" on {many} GPUs{where}"]
        count = f" ({many} alerts)" if many > 1 else ""
        return [name, f"{count}: ", item.annotations.get("summary", "")]
    if cause.name == "straggler":
        culprit: Any = (
            item.culprit if item.node is None else dcc.Link(item.culprit, href=node_href(item.node, item.gpu))
        )
        return ["straggler ", culprit, f", {item.cause}, about {item.slowdown:.0%} slower"]
    if line.kind == "rack":
        return [f"draws {item.current_kw:.1f} kW, {item.share:.0%} of its {item.budget_kw:g} kW budget"]
    return [f"GPU {item.gpu_index}: {item.reason}"]


def _cause_words(cause: Cause) -> str:
    """A cause in plain words, for the "+N more" link's hover."""
    if cause.alerts:
        many = f" ({len(cause.alerts)} alerts)" if len(cause.alerts) > 1 else ""
        return f"{cause.name}{many}: {cause.alerts[0].annotations.get('summary', '')}"
    if cause.name == "straggler":
        return f"straggler: {cause.item.culprit}"
    if hasattr(cause.item, "gpu_index"):
        return f"GPU {cause.item.gpu_index}: {cause.name}"
    return cause.name


def _valid(range_key: str) -> str:
    return range_key if time_ranges.valid(range_key) else DEFAULT_RANGE
