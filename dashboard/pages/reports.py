"""Reports (/reports?range=7d&by=account&sort=-idle): GPU usage accounting over the range to the minute, as the
collector counts it (collector/query/usage.py): per user, account, partition, namespace, GPU model or job,
the GPU-hours allocated, doing work and held idle, the energy, its cost at the site's prices (--reports-config)
and its carbon. Totals, a chart of the largest keys, a table of all of them sorted by any column (in the URL),
and that table as CSV or Parquet."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import dash_mantine_components as dmc
import plotly.graph_objects as go
from dash import Dash, Input, Output, State, callback_context, dcc, html, no_update

from gpuscope.collector import query
from gpuscope.collector.query.usage import DIMENSIONS, Dimension, Figures, Rates, UsageReport, UsageRow
from gpuscope.dashboard import html_table, straggler_cost, time_ranges
from gpuscope.dashboard.components import MUTED, banner, guarded, job_href, nothing, query_params, query_string
from gpuscope.dashboard.context import Context
from gpuscope.dashboard.figures import message_figure, plain
from gpuscope.dashboard.html_table import element, escape, link, span
from gpuscope.dashboard.reports_data import load_straggler_cost, load_usage
from gpuscope.dashboard.sorting import SortedView, next_sort

TITLE = "Reports"
RANGES = {"24h": 24 * 3600, "7d": 7 * 86400, "30d": 30 * 86400}
DEFAULT_RANGE = "7d"
BY: dict[str, Dimension] = {d: d for d in DIMENSIONS}  # what ?by= may say, typed
BY_WORDS = {d: {"model": "GPU model"}.get(d, d) for d in DIMENSIONS}
NONE_LABEL = "(none)"
WHY_NONE = {
    "user": "jobs that named no user",
    "account": "jobs without an account: Kubernetes jobs have none, nor Slurm jobs submitted without one",
    "partition": "jobs without a partition: Kubernetes jobs have none",
    "namespace": "jobs without a namespace: Slurm jobs have none",
    "model": "GPUs of no known model",
    "job": "no job id",
}
BASIS = {
    "sm_active": "weighted by SM activity",
    "util": "weighted by utilisation (these GPUs report no SM activity): overstates work",
    "mixed": "SM activity where the GPUs report it, utilisation where they do not",
    "none": "no activity reading (MIG devices, or no samples): held, not measured",
}
BASIS_SHORT = {
    "sm_active": "by SM activity",
    "util": "by utilisation",
    "mixed": "by SM activity or utilisation",
    "none": "not measured",
}
CHART_KEYS = 20
# Material's green, orange and blue grey: they read on the light and the dark background alike.
COLOURS = {"active": "#2e7d32", "idle": "#ef6c00", "rest": "#90a4ae"}
# usage_1h changes when the collector recomputes an hour (every 5 minutes): a 30-day report every few
# seconds per open tab would be wasted work.
REFRESH_MS = 60_000


@dataclass(frozen=True)
class Column:
    key: str  # in ?sort=
    header: str  # with its unit
    explains: str  # the header's hover text
    value: Callable[[UsageRow], Any]  # the sort value; None sorts last either way
    numeric: bool = True  # right-aligned, the largest first on the first click


def _idle_share(figures: Figures) -> float | None:
    allocated = figures.gpu_hours_allocated
    return 100 * figures.gpu_hours_idle / allocated if allocated > 0 else None


COLUMNS = (
    Column("key", "", "", lambda r: r.key, numeric=False),  # its header is the dimension's name
    Column("jobs", "jobs", "jobs that held a GPU in the range", lambda r: r.jobs),
    Column(
        "allocated",
        "allocated (GPU-h)",
        "GPUs held times hours held; a MIG device counts for its share",
        lambda r: r.figures.gpu_hours_allocated,
    ),
    Column(
        "active",
        "active (GPU-h)",
        "GPU-hours weighted by SM activity (utilisation where a GPU has none)",
        lambda r: r.figures.gpu_hours_active,
    ),
    Column(
        "idle",
        "idle (GPU-h)",
        "held under 5% utilisation for 30 minutes or more: waste, not a pause",
        lambda r: r.figures.gpu_hours_idle,
    ),
    Column("idle_pct", "idle (%)", "the idle share of the GPU-hours allocated", lambda r: _idle_share(r.figures)),
    Column(
        "energy",
        "energy (kWh)",
        "from the GPUs' energy counters, else mean power times time held",
        lambda r: r.figures.energy_kwh,
    ),
    Column("cost", "cost", "the site's price per GPU-hour allocated, by GPU model", lambda r: r.figures.cost),
    Column("co2", "CO2 (kg)", "the energy times the grid's carbon intensity in each hour", lambda r: r.figures.co2_kg),
    Column("basis", "active basis", "what 'active' is weighted by", lambda r: r.figures.active_basis, numeric=False),
)
BY_KEY = {c.key: c for c in COLUMNS}


def valid_range(key: str | None) -> bool:
    return key in RANGES or time_ranges.valid(key)


@dataclass(frozen=True)
class ReportsView(SortedView):
    """What the page shows, as its URL says it."""

    range_key: str = DEFAULT_RANGE  # a key of RANGES, or a span FROM..TO in UTC (time_ranges.py)
    by: Dimension = "user"
    sort: str = ""  # a column key, "-" first for descending; "": the most GPU-hours allocated first

    @classmethod
    def from_search(cls, search: str | None) -> ReportsView:
        params = query_params(search)
        range_key, sort = params.get("range", DEFAULT_RANGE), params.get("sort", "")
        return cls(
            range_key=range_key if valid_range(range_key) else DEFAULT_RANGE,
            by=BY.get(params.get("by", ""), "user"),
            sort=sort if sort.lstrip("-") in BY_KEY else "",
        )

    def search(self) -> str:
        return query_string({"range": self.range_key, "by": self.by, "sort": self.sort})

    def window(self, now: datetime | None = None) -> query.TimeRange:
        if self.range_key in RANGES:
            return query.last(RANGES[self.range_key], now)
        return time_ranges.parse(self.range_key, now)

    def sorted_by(self, key: str) -> ReportsView:
        """This view sorted by `key` (dashboard/sorting.py)."""
        return replace(self, sort=next_sort(self.sort, key, BY_KEY[key].numeric))


def ordered(view: ReportsView, rows: list[UsageRow]) -> list[UsageRow]:
    """The rows in the view's order (the query's, the most allocated first, when none is set); missing
    values (no key, no price) last whichever way."""
    if not view.sort_key:
        return rows
    value = BY_KEY[view.sort_key].value
    known = [r for r in rows if value(r) is not None]
    known.sort(key=lambda r: v.casefold() if isinstance(v := value(r), str) else v, reverse=view.descending)
    return known + [r for r in rows if value(r) is None]


def match(pathname: str) -> dict[str, str] | None:
    return {} if pathname == "/reports" else None


def layout(ctx: Context, search: str, **_: str) -> html.Div:
    view = ReportsView.from_search(search)
    inline = {"display": "inline-flex", "alignItems": "center", "gap": "0.4em", "marginRight": "1.5em"}
    return html.Div(
        [
            html.H2("Usage reports"),
            html.Div(
                [
                    html.Span(
                        [html.Span("range", style={"color": MUTED}), _range_control(view.range_key)], style=inline
                    ),
                    html.Span([html.Span("by", style={"color": MUTED}), _by_control(view.by)], style=inline),
                    html.Span(
                        [
                            html.Span("export", style={"color": MUTED}),
                            html.Button("CSV", id="reports-csv", n_clicks=0),
                            html.Button("Parquet", id="reports-parquet", n_clicks=0),
                            html.Span(id="reports-export-error", style={"color": "var(--mantine-color-error)"}),
                        ],
                        style=inline,
                    ),
                ],
                style={"margin": "0.4em 0"},
            ),
            html.Div(id="reports-status"),
            html.Div(id="reports-headline", className="output"),
            dcc.Graph(id="reports-chart", config={"displaylogo": False}),
            html.Div(id="reports-count", style={"color": MUTED, "margin": "0.4em 0"}),
            html.Div(id="reports-table", className="output"),
            html.Div(id="reports-stragglers", className="output"),
            dcc.Download(id="reports-download"),
            dcc.Interval(id="reports-refresh", interval=max(ctx.options.refresh_ms, REFRESH_MS)),
        ]
    )


def _range_control(range_key: str) -> dcc.RadioItems:
    shown = [{"label": key, "value": key} for key in RANGES]
    if range_key not in RANGES:  # a span from a shared address
        shown.append({"label": time_ranges.label(range_key), "value": range_key})
    return dcc.RadioItems(id="reports-range", options=shown, value=range_key, inline=True)


def _by_control(by: Dimension) -> dcc.RadioItems:
    options = [{"label": BY_WORDS[d], "value": d} for d in DIMENSIONS]
    return dcc.RadioItems(id="reports-by", options=options, value=by, inline=True)


def register(app: Dash, ctx: Context) -> None:
    rates = ctx.options.rates

    def unreachable(message: str) -> tuple[Any, ...]:
        return banner(message, "error"), nothing(), message_figure(message), "", nothing()

    @app.callback(
        Output("reports-status", "children"),
        Output("reports-headline", "children"),
        Output("reports-chart", "figure"),
        Output("reports-count", "children"),
        Output("reports-table", "children"),
        Input("reports-refresh", "n_intervals"),
        Input("url", "search"),
    )
    @guarded(unreachable)
    def refresh(_: int | None, search: str | None) -> tuple[Any, ...]:
        view = ReportsView.from_search(search)
        report = load_usage(ctx.pool, view.window(), view.by, rates)
        if report.computed_to is None:
            words = "No usage computed in this range: the collector counts each hour from its minute rollups."
            return banner(words, "empty"), nothing(), message_figure("No usage in this range."), "", nothing()
        if not report.rows:
            empty = message_figure("No GPU was held by a job in this range.")
            return _status(report), headline(report, rates), empty, "", nothing()
        count = f"{len(report.rows)} {BY_WORDS[view.by]}{'' if len(report.rows) == 1 else 's'} · click a header to sort"
        return _status(report), headline(report, rates), chart(report), count, usage_table(view, report, rates)

    @app.callback(
        Output("reports-stragglers", "children"),
        Input("reports-refresh", "n_intervals"),
        Input("url", "search"),
    )
    @guarded(lambda message: banner(message, "error"))
    def stragglers(_: int | None, search: str | None) -> Any:
        return straggler_cost.section(*load_straggler_cost(ctx.pool, ReportsView.from_search(search).window()))

    @app.callback(
        Output("reports-download", "data"),
        Output("reports-export-error", "children"),
        Input("reports-csv", "n_clicks"),
        Input("reports-parquet", "n_clicks"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    @guarded(lambda message: (no_update, message))
    def download(_csv: int, _parquet: int, search: str | None) -> tuple[Any, str]:
        kind = "parquet" if callback_context.triggered_id == "reports-parquet" else "csv"
        view = ReportsView.from_search(search)
        return export(view, load_usage(ctx.pool, view.window(), view.by, rates), kind)

    @app.callback(
        Output("url", "search", allow_duplicate=True),
        Input("reports-range", "value"),
        Input("reports-by", "value"),
        State("url", "search"),
        prevent_initial_call=True,
    )
    def share(range_key: str, by: str, search: str | None) -> Any:
        now = ReportsView.from_search(search)
        wanted = replace(now, range_key=range_key if valid_range(range_key) else now.range_key, by=BY.get(by, now.by))
        return no_update if wanted == now else wanted.search()

    @app.callback(
        Output("reports-range", "value"),
        Output("reports-by", "value"),
        Input("url", "search"),
        State("reports-range", "value"),
        State("reports-by", "value"),
        prevent_initial_call=True,
    )
    def follow(search: str | None, range_now: str, by_now: str) -> tuple[Any, ...]:
        """The controls follow the address when it changed otherwise (back, a shared link)."""
        view = ReportsView.from_search(search)
        wanted, shown = (view.range_key, view.by), (range_now, by_now)
        return tuple(no_update if now == want else want for want, now in zip(wanted, shown, strict=True))


def _status(report: UsageReport) -> html.Div:
    span_words = f"From {report.start:%Y-%m-%d %H:%M} to {report.end:%Y-%m-%d %H:%M} UTC"
    counted = f", counted up to {report.computed_to.astimezone(UTC):%Y-%m-%d %H:%M} UTC" if report.computed_to else ""
    hours_only = [
        html.Div(
            f"Whole hours only from {span.start:%Y-%m-%d %H:%M} to {span.end:%Y-%m-%d %H:%M} UTC:"
            " the minute rollups there are past their retention",
            className="reports-hours-only",
        )
        for span in report.hours_only
    ]
    return html.Div([html.Div(span_words + counted), *hours_only], style={"color": MUTED})


def hours(value: float) -> str:
    """GPU-hours (and kWh, kg) to a tenth; a small figure to a hundredth, not a bare 0.0."""
    return f"{value:,.2f}" if abs(value) < 10 else f"{value:,.1f}"


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole > 0 else "-"


def cost_words(figures: Figures, currency: str | None, rates: Rates) -> tuple[str, str]:
    """The cost as the headline says it, and why it is partial or missing."""
    if not rates.prices:
        return "no price configured", "prices per GPU model: --reports-config"
    if figures.cost is None:
        return "no price", "none of these GPUs' models has a price"
    missing = (
        f"; excludes {hours(figures.unpriced_gpu_hours)} GPU-h without a price" if figures.unpriced_gpu_hours else ""
    )
    return f"{figures.cost:,.2f}" + (f" {currency}" if currency else ""), f"at the site's prices{missing}"


def headline(report: UsageReport, rates: Rates) -> html.Div:
    t = report.totals
    allocated = t.gpu_hours_allocated
    cost, cost_note = cost_words(t, report.currency, rates)
    cards = [
        _card(
            "allocated", "allocated", f"{hours(allocated)} GPU-h", f"{report.jobs} job{'' if report.jobs == 1 else 's'}"
        ),
        _card(
            "active",
            "active",
            f"{hours(t.gpu_hours_active)} GPU-h",
            f"{_share(t.gpu_hours_active, allocated)} of allocated, {BASIS_SHORT[t.active_basis]}",
            BASIS[t.active_basis],
        ),
        _card(
            "idle", "idle", f"{hours(t.gpu_hours_idle)} GPU-h", f"{_share(t.gpu_hours_idle, allocated)} of allocated"
        ),
        _card("energy", "energy", f"{hours(t.energy_kwh)} kWh", "drawn by the GPUs while jobs held them"),
        _card("cost", "cost", cost, cost_note),
        _card("co2", "CO2", f"{hours(t.co2_kg)} kg", "at the grid's carbon intensity each hour"),
    ]
    return html.Div(cards, className="cards")


def _card(key: str, label: str, value: str, note: str, explains: str | None = None) -> dmc.Paper:
    body = [
        html.Div(label, className="card-label"),
        html.Div(value, className="card-value", id=f"reports-{key}-value"),
        html.Div(note, className="card-note", id=f"reports-{key}-note", title=explains),
    ]
    return dmc.Paper(body, id=f"reports-{key}", className="card", withBorder=True, radius="md")


def key_label(key: str | None) -> str:
    return NONE_LABEL if key is None else key


def chart(report: UsageReport) -> go.Figure:
    """The largest keys by GPU-hours allocated, each bar split into active, idle and the rest of the time
    held (partly busy, short pauses, or not measured); the largest on top."""
    top = list(reversed(report.rows[:CHART_KEYS]))
    labels = [plain(key_label(r.key)) for r in top]
    parts = {
        "active": [r.figures.gpu_hours_active for r in top],
        "idle": [r.figures.gpu_hours_idle for r in top],
        "rest": [
            max(0.0, r.figures.gpu_hours_allocated - r.figures.gpu_hours_active - r.figures.gpu_hours_idle) for r in top
        ],
    }
    # "rest" is the time held that was neither active nor idle: named for what it holds, not left to guess.
    names = {"active": "active", "idle": "idle", "rest": "rest: partly busy, short pauses, unmeasured"}
    hovers = {
        **names,
        "rest": "held, neither active nor idle: the unused share of partly busy GPUs, pauses under 30 minutes,"
        " time without an activity reading",
    }
    figure = go.Figure(
        [
            go.Bar(
                y=labels,
                x=values,
                name=names[part],
                orientation="h",
                marker_color=COLOURS[part],
                hovertemplate=f"%{{y}}<br>%{{x:.2f}} GPU-h {hovers[part]}<extra></extra>",
            )
            for part, values in parts.items()
        ]
    )
    more = f", the top {CHART_KEYS} of {len(report.rows)}" if len(report.rows) > CHART_KEYS else ""
    figure.update_layout(
        title=plain(f"GPU-hours allocated per {BY_WORDS[report.by]}{more}"),
        barmode="stack",
        xaxis={"title": "GPU-hours", "rangemode": "tozero"},
        yaxis={"type": "category", "automargin": True},  # numeric job ids stay names, not positions on an axis
        height=120 + 24 * len(top),
        margin={"l": 60, "r": 20, "t": 50, "b": 40},
        legend={"orientation": "h", "traceorder": "normal", "y": -0.15 if len(top) > 4 else -0.4},
        uirevision=f"reports-{report.by}",
    )
    return figure


def usage_table(view: ReportsView, report: UsageReport, rates: Rates) -> Any:
    """All the rows, as one HTML table (dashboard/html_table.py), its headers links that sort it."""
    header = [element("span", _sort_link(view, c, report), title=c.explains or None) for c in COLUMNS]
    body = [[_cell(c.key, row, report, rates) for c in COLUMNS] for row in ordered(view, report.rows)]
    return html_table.table(header, body, id="reports-rows", numeric=[c.numeric for c in COLUMNS])


def _sort_link(view: ReportsView, column: Column, report: UsageReport) -> str:
    words = BY_WORDS[report.by] if column.key == "key" else column.header
    if column.key == "cost" and report.currency:
        words = f"cost ({report.currency})"
    arrow = (" ▼" if view.descending else " ▲") if view.sort_key == column.key else ""
    return link(words + arrow, "/reports" + view.sorted_by(column.key).search(), className="sort-link")


def _cell(key: str, row: UsageRow, report: UsageReport, rates: Rates) -> str:
    f = row.figures
    match key:
        case "key":
            if row.key is None:
                return span(NONE_LABEL, title=WHY_NONE[report.by], className="gap")
            if report.by == "job":
                owners = ", ".join(f"{what} {name}" for what, name in _owners(row).items() if name)
                return link(row.key, job_href(row.key), title=owners or None)
            return escape(row.key)
        case "jobs":
            return str(row.jobs)
        case "allocated" | "active" | "idle" | "energy" | "co2":
            return hours(BY_KEY[key].value(row))
        case "idle_pct":
            share = _idle_share(f)
            return "-" if share is None else f"{share:.0f}"
        case "cost":
            if f.cost is None:
                why = "no price for these GPUs' models" if rates.prices else "no price configured (--reports-config)"
                return span("-", title=why, className="gap")
            partial = f"excludes {hours(f.unpriced_gpu_hours)} GPU-h without a price" if f.unpriced_gpu_hours else None
            return span(f"{f.cost:,.2f}", title=partial)
        case "basis":
            return span(f.active_basis, title=BASIS[f.active_basis])
    raise ValueError(f"unknown column {key!r}")


# The export's columns: the span and grouping, the key (and a job's owners), every figure, the currency.
FIGURES = tuple(Figures(0, 0, 0, 0, 0, 0, None, 0, 0, "none", 0).as_json())
OWNERS = ("user", "account", "partition", "namespace")
TYPES = {"csv": "text/csv", "parquet": "application/vnd.apache.parquet"}


def _owners(row: UsageRow) -> dict[str, str | None]:
    """A job's user, account, partition and namespace (set only in a report by job)."""
    return dict(zip(OWNERS, (row.user, row.account, row.partition, row.namespace), strict=True))


def export_columns(by: Dimension) -> list[str]:
    return ["start", "end", "by", "key", *(OWNERS if by == "job" else ()), "jobs", *FIGURES, "currency"]


def export_rows(view: ReportsView, report: UsageReport) -> list[dict[str, Any]]:
    owners = report.by == "job"
    return [
        {
            "start": report.start,
            "end": report.end,
            "by": report.by,
            "key": row.key,
            **(_owners(row) if owners else {}),
            "jobs": row.jobs,
            **row.figures.as_json(),
            "currency": report.currency,
        }
        for row in ordered(view, report.rows)
    ]


def csv_bytes(columns: list[str], rows: list[dict[str, Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({name: _csv_value(value) for name, value in row.items()})
    return out.getvalue().encode("utf-8")


def _csv_value(value: Any) -> Any:
    """Times in ISO 8601; a text that a spreadsheet would run as a formula (a user named '=HYPERLINK(...)')
    behind an apostrophe, which spreadsheets show as text."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def parquet_bytes(columns: list[str], rows: list[dict[str, Any]]) -> bytes:
    # Imported here: the dashboard runs without pyarrow, only this export needs it.
    import pyarrow as pa
    import pyarrow.parquet as pq

    text = {"by", "key", *OWNERS, "active_basis", "currency"}
    typed = {"start": pa.timestamp("s", tz="UTC"), "end": pa.timestamp("s", tz="UTC"), "jobs": pa.int64()}
    schema = pa.schema([(n, typed.get(n, pa.string() if n in text else pa.float64())) for n in columns])
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), sink)
    return sink.getvalue()


def export(view: ReportsView, report: UsageReport, kind: str) -> tuple[Any, str]:
    """dcc.Download's data for the report as `kind` ("csv" or "parquet"), and a message if it cannot be made."""
    columns, rows = export_columns(report.by), export_rows(view, report)
    try:
        content = parquet_bytes(columns, rows) if kind == "parquet" else csv_bytes(columns, rows)
    except ImportError:
        return no_update, "Parquet export needs pyarrow, not installed here (pip install pyarrow); CSV works."
    name = f"gpuscope-usage-by-{report.by}-{report.start:%Y%m%dT%H%M}-{report.end:%Y%m%dT%H%M}.{kind}"
    return dcc.send_bytes(content, name, type=TYPES[kind]), ""
