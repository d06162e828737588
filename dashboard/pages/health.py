"""Fleet health (/health?state=drained&range=24h): how many nodes are in each state, each count a link that
filters the list by it; the nodes not healthy (or in the chosen state, or held) with since when and why,
who holds them, their GPUs' verdicts and the evidence of their current episode (and, on an unhealthy node,
the drain a dry run recorded and did not run); then the audit trail over the range: every transition, and
every scheduler action done or only planned (dry run); the episodes (each time a node left healthy: its
cause, repair, time out and whether it failed again) and, per cause, how often the repair held. Node names
never wrap. The health loop
(health/loop.py) writes it; this page reads it through dashboard/health_data.py (health/reads.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import dash_mantine_components as dmc
from dash import Dash, Input, Output, State, dcc, html, no_update

from gpuscope.dashboard import html_table, time_ranges
from gpuscope.dashboard.components import ago, banner, guarded, node_href, nothing, query_params, query_string
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.health_data import HealthData, load_health
from gpuscope.dashboard.html_table import element, escape, link, span
from gpuscope.health.episode_reads import EpisodeRow, RepairOutcome
from gpuscope.health.episode_words import duration, rate
from gpuscope.health.reads import (
    ActionRow,
    DryRunDrain,
    EvidenceRow,
    GpuVerdict,
    HealthCounts,
    NodeHealth,
    TransitionRow,
)
from gpuscope.health.xid_catalog import ACTIONS

TITLE = "Health"
NOT_HEALTHY, HELD = "", "held"  # the default filter: every node not healthy; and the nodes an operator holds
MEANINGS = {  # each filter, as its card says on hover
    NOT_HEALTHY: "every node that is not healthy",
    "healthy": "no finding against it, or its last episode is over",
    "suspect": "a finding to watch: no action yet",
    "unhealthy": "to be taken out: a drain is requested, refused, or only recorded by a dry run (its reason says why)",
    "drained": "out of service in the scheduler",
    "validating": "quiet long enough: checks run before it returns to service",
    HELD: "held by an operator: gpuscope neither drains nor resumes it",
}
DEFAULT_RANGE = "24h"
SHOWN_MAX = 500  # rows per table (the least healthy nodes, the newest entries): more is a narrower view away
EVIDENCE_INLINE = 5  # a node's newest findings shown at once; the older ones fold away


@dataclass(frozen=True)
class HealthView:
    """What the page shows, as its URL says it."""

    state: str  # a state, HELD, or NOT_HEALTHY
    range_key: str  # the audit trail's range

    @classmethod
    def from_search(cls, search: str | None) -> HealthView:
        params = query_params(search)
        state, range_key = params.get("state", NOT_HEALTHY), params.get("range", DEFAULT_RANGE)
        return cls(
            state if state in MEANINGS else NOT_HEALTHY, range_key if time_ranges.valid(range_key) else DEFAULT_RANGE
        )

    def href(self) -> str:
        return "/health" + query_string({"state": self.state, "range": self.range_key})


def load(ctx: Context, view: HealthView) -> HealthData:
    held = view.state == HELD
    state = None if held else view.state or None
    return load_health(ctx.pool, state, held, time_ranges.parse(view.range_key), SHOWN_MAX)


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/health" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    view = HealthView.from_search(search)
    return html.Div(
        [
            html.H2("Fleet health"),
            html.Div(id="health-status"),
            html.Div(id="health-counts", className="output"),
            html.Div(id="health-nodes", className="output"),
            html.H3("Audit trail"),
            time_ranges.picker("health-range", view.range_key),
            html.H4("Transitions"),
            html.Div(id="health-transitions", className="output"),
            html.H4("Scheduler actions"),
            html.Div(id="health-actions", className="output"),
            html.H3("Episodes"),
            html.Div(id="health-episodes", className="output"),
            html.H3("Repairs by cause"),
            html.Div(id="health-repairs", className="output"),
        ]
    )


def register(app: Dash, ctx: Context) -> None:
    time_ranges.register(app, "health-range")

    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), nothing(), nothing(), nothing(), nothing(), nothing(), nothing()

    @app.callback(
        Output("health-status", "children"),
        Output("health-counts", "children"),
        Output("health-nodes", "children"),
        Output("health-transitions", "children"),
        Output("health-actions", "children"),
        Output("health-episodes", "children"),
        Output("health-repairs", "children"),
        Input("refresh", "n_intervals"),
        Input("url", "search"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, search: str | None) -> tuple[Any, ...]:
        view = HealthView.from_search(search)
        loaded = load(ctx, view)
        return (
            status(loaded.counts),
            headline(loaded.counts, view),
            nodes_part(loaded.nodes, loaded.counts, view),
            transitions_part(loaded.transitions),
            actions_part(loaded.actions),
            episodes_part(loaded.episodes),
            repairs_part(loaded.repairs),
        )

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("health-range", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(range_key: str, search: str | None) -> Any:
        now = HealthView.from_search(search)
        wanted = replace(now, range_key=range_key)
        return no_update if wanted == now else wanted.href().removeprefix("/health")


def status(counts: HealthCounts) -> Any:
    """What an empty page means: no node known, or a health loop that has recorded nothing (yet)."""
    loop = "No health data yet: the health loop runs in the collector"
    if counts.nodes == 0:
        return banner(f"{loop}, over the nodes exporters report; none has reported.", "empty")
    if not counts.recorded:
        return banner(f"{loop} and has recorded nothing: all {counts.nodes} nodes count as healthy.", "empty")
    return []


def headline(counts: HealthCounts, view: HealthView) -> html.Div:
    """A card per state with its count (and the nodes not healthy, and those held), each a link to the list
    filtered by it."""
    numbers = {NOT_HEALTHY: counts.nodes - counts.states["healthy"], **counts.states, HELD: counts.held}
    cards = []
    for key, meaning in MEANINGS.items():
        name = key or "troubled"
        body = [
            html.Div({NOT_HEALTHY: "not healthy"}.get(key, key), className="card-label"),
            html.Div(str(numbers[key]), className="card-value", id=f"health-{name}-value"),
        ]
        chosen = " health-card-chosen" if key == view.state else ""
        target = replace(view, state=key).href()
        cards.append(
            dmc.Paper(
                dcc.Link(body, href=target, title=meaning, className="card-link"),
                id=f"health-{name}",
                className=f"card health-card health-card-{name}{chosen}",
                withBorder=True,
                radius="md",
            )
        )
    return html.Div(cards, className="cards")


def nodes_part(nodes: list[NodeHealth], counts: HealthCounts, view: HealthView) -> list[Any]:
    title = {NOT_HEALTHY: "Nodes not healthy", HELD: "Nodes held by an operator"}.get(view.state, f"Nodes {view.state}")
    if not nodes:
        if counts.nodes == 0:
            return [html.H3(title), nothing()]
        empty = {NOT_HEALTHY: f"All {counts.nodes} nodes healthy.", HELD: "No node is held by an operator."}
        return [html.H3(title), banner(empty.get(view.state, f"No node is {view.state}."), "empty")]
    more = f" (the first {SHOWN_MAX} of {len(nodes)})" if len(nodes) > SHOWN_MAX else ""
    several = len({n.cluster for n in nodes}) > 1
    header = ["node", *(["cluster"] if several else []), "state", "since", "reason", "held by", "GPUs"]
    header.append("evidence this episode, newest first (UTC)")
    rows = [
        [
            node_name(n.node),
            *([escape(n.cluster)] if several else []),
            state_badge(n.state) + (dry_run_badge(n.would_drain) if n.would_drain else ""),
            moment(n.since) if n.since else span("never judged", className="muted"),
            escape(n.reason) if n.reason else span("-", className="muted"),
            escape(n.held_by or ""),
            gpu_verdicts(n.gpus),
            evidence(n.evidence),
        ]
        for n in nodes[:SHOWN_MAX]
    ]
    numeric = [False] * len(header)
    table = html_table.table([escape(h) for h in header], rows, id="health-nodes-table", numeric=numeric)
    return [html.H3(title + more), table]


def node_name(node: str) -> str:
    """The node's name as a link to its page, on one line: a narrow column cut "node-010" into "node-" and "010"."""
    return element("span", link(node, node_href(node)), className="one-line")


def state_badge(state: str) -> str:
    return span(state, className=f"state-badge state-{state}")


def dry_run_badge(drain: DryRunDrain) -> str:
    """Marks an unhealthy node whose drain a dry run recorded: nothing took it out of service."""
    title = f"dry run: nothing was drained; recorded {drain.at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC: {drain.detail}"
    return " " + span("would drain (dry run)", title=title, className="state-badge state-dry-run")


def moment(at: datetime, words: str | None = None) -> str:
    """Since when, as an operator reads it ("3 h ago"), with the moment in UTC on hover."""
    return span(words or ago(at), title=f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC", className="one-line")


def gpu_verdicts(gpus: list[GpuVerdict]) -> str:
    if not gpus:
        return span("no GPU known", className="muted")
    marked = [g for g in gpus if g.state != "healthy"]
    parts = [span(f"GPU {g.gpu} {g.state}", title=g.uuid, className=f"state-badge state-{g.state}") for g in marked]
    fine = [g for g in gpus if g.state == "healthy"]
    if fine:
        words = f"{len(fine)} healthy" if marked else f"all {len(fine)} healthy"
        parts.append(span(words, title=", ".join(f"GPU {g.gpu}" for g in fine), className="muted"))
    return element("span", "".join(parts), className="gpu-verdicts")


def evidence(rows: list[EvidenceRow]) -> str:
    if not rows:
        return span("-", title="no finding since its last return to healthy", className="muted")

    def line(e: EvidenceRow) -> str:
        cells = [
            span(f"{e.at.astimezone(UTC):%m-%d %H:%M:%S}", title=ago(e.at), className="one-line"),
            span(e.severity, className=f"state-badge state-{e.severity}"),
            span(e.detail, title=e.kind + ("" if e.code is None else f" {e.code}")),
            span(e.action, title=ACTIONS.get(e.action, "the rule's recommended action"), className="evidence-action"),
        ]
        return element("tr", "".join(element("td", cell) for cell in cells))

    shown = element("table", "".join(line(e) for e in rows[:EVIDENCE_INLINE]), className="evidence")
    if len(rows) <= EVIDENCE_INLINE:
        return shown
    older = element("table", "".join(line(e) for e in rows[EVIDENCE_INLINE:]), className="evidence")
    return shown + element("details", element("summary", f"{len(rows) - EVIDENCE_INLINE} older") + older)


def transitions_part(rows: list[TransitionRow]) -> Any:
    if not rows:
        return banner("No transition in this range.", "empty")
    header = ["at (UTC)", "node", "from", "", "to", "by", "reason"]
    body = [
        [
            moment(t.at, f"{t.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}"),
            node_name(t.node),
            state_badge(t.from_state),
            "→",
            state_badge(t.to_state),
            escape(t.actor),
            escape(t.reason),
        ]
        for t in rows[:SHOWN_MAX]
    ]
    return [_clipped(len(rows)), html_table.table(header, body, id="health-transitions-table", numeric=[False] * 7)]


def actions_part(rows: list[ActionRow]) -> Any:
    if not rows:
        return banner("No scheduler action in this range: drains, resumes, validations, refusals and holds.", "empty")
    header = ["at (UTC)", "node", "action", "scheduler", "mode", "outcome", "detail"]
    outcomes = {True: span("ok", className="outcome-ok"), False: span("failed", className="outcome-failed")}
    body = [
        [
            moment(a.at, f"{a.at.astimezone(UTC):%Y-%m-%d %H:%M:%S}"),
            node_name(a.node),
            escape(a.action),
            escape(a.scheduler),
            "dry run" if a.dry_run else "live",
            outcomes[a.ok] if a.ok is not None else span("not run", className="muted"),
            escape(a.detail),
        ]
        for a in rows[:SHOWN_MAX]
    ]
    return [_clipped(len(rows)), html_table.table(header, body, id="health-actions-table", numeric=[False] * 7)]


def episodes_part(rows: list[EpisodeRow]) -> Any:
    """Each time a node left healthy in the range, newest first, as `gpuscope health episodes` lists them."""
    if not rows:
        return banner("No episode in this range: no node left healthy.", "empty")
    header = ["started (UTC)", "node", "GPU", "cause", "repair", "out for", "GPU-hours", "outcome",
              "failed again 7 d", "failed again 30 d", "failing test", "episode"]  # fmt: skip
    body = [
        [
            moment(e.started_at, f"{e.started_at.astimezone(UTC):%Y-%m-%d %H:%M}"),
            node_name(e.node),
            _gpu(e),
            span(e.cause, title=e.cause_detail),
            span(e.repair, title=" ".join(filter(None, [e.repair_reason, e.repair_result]))) if e.repair else "-",
            span(duration(e.out_s), className="one-line"),
            f"{e.gpu_hours:.1f}",
            escape(e.outcome) + (" " + span("dry run", className="muted") if e.dry_run else ""),
            _again(e.failed_again_7d),
            _again(e.failed_again_30d),
            span(e.failed_test, title=e.validation) if e.failed_test else "",
            escape(e.episode_id),
        ]
        for e in rows[:SHOWN_MAX]
    ]
    numeric = [False] * 6 + [True] + [False] * 4 + [True]
    return [_clipped(len(rows)), html_table.table(header, body, id="health-episodes-table", numeric=numeric)]


def _gpu(e: EpisodeRow) -> str:
    if e.gpu is None:
        return span("node", className="muted")
    return span(f"GPU {e.gpu}" + (" (out alone)" if e.scope == "gpu" else ""), title=e.gpu_uuid, className="one-line")


def _again(failed: bool | None) -> str:
    """Whether the node (or GPU) failed again within the window; '?' while that is not known yet."""
    if failed is None:
        return span("?", title="not known yet: still open, or the window has not passed", className="muted")
    return span("yes", className="outcome-failed") if failed else span("no", className="outcome-ok")


def repairs_part(rows: list[RepairOutcome]) -> Any:
    """Per cause and repair, the failures back in service in the range and whether the repair held."""
    if not rows:
        return banner("No failure came back into service in this range.", "empty")
    header = ["cause", "repair", "returned", "held 7 d", "failed 7 d", "too early 7 d", "held rate 7 d",
              "held 30 d", "failed 30 d", "too early 30 d", "held rate 30 d"]  # fmt: skip
    body = [
        [
            escape(r.cause),
            escape(r.repair or "-"),
            *map(escape, (r.returned, r.held_7d, r.failed_7d, r.too_early_7d)),
            rate(r.held_rate_7d),
            *map(escape, (r.held_30d, r.failed_30d, r.too_early_30d)),
            rate(r.held_rate_30d),
        ]
        for r in rows
    ]
    note = html.Div(
        "Failures (taken out, or given a repair in a dry run) back in service in this range. Held: no failure"
        " again of the same node (or GPU) within the days, and they have passed; a rate is held / (held + failed).",
        className="muted",
    )
    return [note, html_table.table(header, body, id="health-repairs-table", numeric=[False] * 2 + [True] * 9)]


def _clipped(found: int) -> Any:
    """Says so when a table shows only the newest SHOWN_MAX rows."""
    if found <= SHOWN_MAX:
        return nothing()
    return html.Div(f"The newest {SHOWN_MAX}: narrow the range for the rest.", className="muted")
