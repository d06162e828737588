"""Usage reports: GPU-hours allocated, doing work and held idle, energy, cost and carbon, by user, account,
partition, namespace, GPU model or job, over the window asked to the minute: its whole hours from usage_1h
(collector/store/usage.py), the parts of an hour at its edges computed afresh from the minute rollups
(collector/query/usage_window.py); and one job's report with its GPUs, computed afresh from the minute
rollups (jobstats).

Cost is the site's price per GPU-hour allocated, by GPU model (Rates); carbon is the energy times the grid's
intensity in each hour (at the hour's start, for a part of an hour too): the series the site loaded
(grid_intensity) where it covers the hour, else the configured constant.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from psycopg import Connection, sql

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.collector.query.usage_window import Span, WindowPlan, ceil_hour, floor_hour, plan_window
from gpuscope.collector.store.usage import HOUR_ROWS, USAGE_COLUMNS, usage_params

Dimension = Literal["user", "account", "partition", "namespace", "model", "job"]
DIMENSIONS: tuple[Dimension, ...] = ("user", "account", "partition", "namespace", "model", "job")
_COLUMN = {"user": "username", "account": "account", "partition": "partition", "namespace": "namespace",
           "model": "model", "job": "job_id"}  # fmt: skip
ActiveBasis = Literal["sm_active", "util", "mixed", "none"]
JOULES_PER_KWH = 3.6e6
# The world's average carbon intensity of electricity in 2023 (Ember, Global Electricity Review 2024), used
# until the site configures its own grid: a number, never a guess of 300 W per GPU.
DEFAULT_GRID_G_PER_KWH = 480.0


@dataclass(frozen=True)
class Rates:
    """The site's prices and grid: `prices` are (model pattern, price per GPU-hour allocated) pairs, shell-
    style patterns matched case-insensitively, the first match winning; no match: no price (cost null)."""

    currency: str | None = None
    prices: tuple[tuple[str, float], ...] = ()
    grid_g_per_kwh: float = DEFAULT_GRID_G_PER_KWH

    def price(self, model: str) -> float | None:
        for pattern, per_gpu_hour in self.prices:
            if fnmatch.fnmatchcase(model.lower(), pattern.lower()):
                return per_gpu_hour
        return None


@dataclass(frozen=True)
class Figures:
    gpu_hours_allocated: float
    gpu_hours_measured: float  # of which with an activity reading
    gpu_hours_active: float  # weighted by SM activity (utilisation where a GPU has none): see active_basis
    gpu_hours_tensor_active: float
    gpu_hours_idle: float
    energy_kwh: float
    cost: float | None  # None: no price for any of these GPUs' models
    co2_kg: float
    unpriced_gpu_hours: float  # allocated on models without a price, not in cost
    active_basis: ActiveBasis
    energy_from_counter: float  # the share of measured time whose energy came from the energy counter

    def as_json(self) -> dict[str, Any]:
        return {
            "gpu_hours_allocated": self.gpu_hours_allocated,
            "gpu_hours_active": self.gpu_hours_active,
            "gpu_hours_idle": self.gpu_hours_idle,
            "energy_kwh": self.energy_kwh,
            "cost": self.cost,
            "co2_kg": self.co2_kg,
            "gpu_hours_measured": self.gpu_hours_measured,
            "gpu_hours_tensor_active": self.gpu_hours_tensor_active,
            "active_basis": self.active_basis,
            "unpriced_gpu_hours": self.unpriced_gpu_hours,
            "energy_from_counter": self.energy_from_counter,
        }


@dataclass(frozen=True)
class UsageRow:
    key: str | None  # None: jobs without one (a Kubernetes job has no account, a Slurm job no namespace)
    figures: Figures
    jobs: int
    user: str | None = None  # by job: the job's user, account, partition and namespace
    account: str | None = None
    partition: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class UsageReport:
    start: datetime  # the range asked for, to the minute (UTC); widened only where hours_only says
    end: datetime
    by: Dimension
    rows: list[UsageRow]  # the most GPU-hours allocated first
    totals: Figures
    jobs: int
    currency: str | None
    computed_to: datetime | None  # usage is counted up to here (None: nothing computed in the range)
    # Whole hours counted at the window's edges where their minute rollups are gone (past their retention):
    # start or end moved to the hour's edge there. Empty: the window is counted to the minute.
    hours_only: tuple[Span, ...] = ()


def intensity_at(at: str) -> str:
    """SQL for the grid's intensity at the time `at` (a column or parameter, never input): the loaded value
    holding then, else the configured constant (parameter `grid`)."""
    return f"coalesce((SELECT g_per_kwh FROM grid_intensity WHERE ts <= {at} ORDER BY ts DESC LIMIT 1), %(grid)s)"  # noqa: S608


_USAGE_LIST = ", ".join(USAGE_COLUMNS)
_TEXT_COLUMNS = ("job_id", "model", "username", "account", "partition", "namespace")
_TYPES = {c: "timestamptz" if c == "bucket" else "text" if c in _TEXT_COLUMNS else "float8" for c in USAGE_COLUMNS}
_UNNEST = ", ".join(f"%(fresh_{c})s::{t}[]" for c, t in _TYPES.items())
_FRESH = f"fresh AS (SELECT * FROM unnest({_UNNEST}) AS f({_USAGE_LIST}))"  # noqa: S608 (constants)
# The rows counted are usage_1h's of the whole hours and those computed for the parts of an hour (fresh, passed
# as arrays: nothing is written, so a read-only replica answers too). Per job first (a hash aggregate: a job
# counted once per key, without DISTINCT's sort), then per key and in all. The grid is an array of the hourly
# intensities over the window, read by each row's hour: no join per row.
_REPORT = (
    "WITH grid AS MATERIALIZED (SELECT array_agg(" + intensity_at("h") + " ORDER BY h) AS g"  # noqa: S608
    "   FROM generate_series(%(grid_lo)s::timestamptz,"
    "   %(grid_hi)s::timestamptz - interval '1 hour', interval '1 hour') AS h),"
    " price AS (SELECT * FROM unnest(%(models)s::text[], %(prices)s::float8[]) AS p(model, per_hour)),"
    f" {_FRESH}, counted AS (SELECT {_USAGE_LIST} FROM usage_1h WHERE bucket >= %(lo)s AND bucket < %(hi)s"
    f"   UNION ALL SELECT {_USAGE_LIST} FROM fresh),"
    " per_job AS MATERIALIZED (SELECT {key} AS key, job_id, sum(allocated_s) AS a, sum(measured_s) AS m,"
    "   sum(active_s) AS act, sum(active_sm_s) AS sm, sum(tensor_s) AS t, sum(idle_s) AS i, sum(energy_j) AS e,"
    "   sum(energy_counter_s) AS ec, sum(energy_j * grid.g[1 + floor(extract(epoch FROM"
    "   u.bucket - %(grid_lo)s::timestamptz) / 3600)::int]) AS eg, sum(allocated_s * per_hour) AS c,"
    "   sum(allocated_s) FILTER (WHERE per_hour IS NULL) AS un, min(username) AS u, min(account) AS acc,"
    "   min(partition) AS p, min(namespace) AS n"
    "   FROM counted u CROSS JOIN grid LEFT JOIN price USING (model) GROUP BY 1, 2)"
    " SELECT false, key, sum(a), sum(m), sum(act), sum(sm), sum(t), sum(i), sum(e), sum(ec), sum(eg), sum(c),"
    "   sum(un), count(*), min(u), min(acc), min(p), min(n) FROM per_job GROUP BY key"
    " UNION ALL SELECT true, NULL, sum(a), sum(m), sum(act), sum(sm), sum(t), sum(i), sum(e), sum(ec), sum(eg),"
    "   sum(c), sum(un), count(DISTINCT job_id), NULL, NULL, NULL, NULL FROM per_job"
    " ORDER BY 3 DESC, 2"  # the most GPU-hours first: sorted here, not among 100,000 jobs' rows in Python
)
# A report reads a month of a large fleet once: JIT compiling its plan costs more than it saves (a third of
# a second), and its per-job aggregate wants memory rather than a sort on disk. Each statement is planned for
# its own window: once psycopg prepares a statement run often on one connection (a dashboard's), PostgreSQL
# may switch to a generic plan, and the generic plan of the minutes' CTEs took 250 s, not 0.6 s, for an hour
# of 2,000 GPUs.
_SETTINGS = (
    "SELECT set_config('jit', 'off', true), set_config('work_mem', '64MB', true),"
    " set_config('plan_cache_mode', 'force_custom_plan', true)"
)


def usage_report(
    conn: Connection[Any], time_range: TimeRange, by: Dimension, rates: Rates | None = None, now: datetime | None = None
) -> UsageReport:
    """Usage by `by` over `time_range` to the minute (`now`: where a running allocation ends)."""
    rates, now = rates or Rates(), now or datetime.now(UTC)
    models = [row[0] for row in conn.execute("SELECT DISTINCT model FROM gpu").fetchall()]
    priced = [(m, rates.price(m)) for m in models]
    with conn.transaction():
        conn.execute(_SETTINGS)
        plan = plan_window(conn, time_range)
        hours = plan.hours or Span(plan.start, plan.start)  # none: an empty range of usage_1h
        params = {
            "lo": hours.start,
            "hi": hours.end,
            "grid_lo": floor_hour(plan.start),
            "grid_hi": ceil_hour(plan.end),
            "grid": rates.grid_g_per_kwh,
            "models": [m for m, p in priced if p is not None],
            "prices": [p for _, p in priced if p is not None],
            **fresh_columns(conn, plan, now),
        }
        rows = conn.execute(sql.SQL(_REPORT).format(key=sql.Identifier(_COLUMN[by])), params).fetchall()
    out, totals, jobs = [], figures_from_sums(None), 0
    for total, key, *sums in rows:
        figures = figures_from_sums(sums[:11])
        if total:
            totals, jobs = figures, sums[11]
        else:
            extra = sums[12:] if by == "job" else (None,) * 4
            out.append(UsageRow(key, figures, sums[11], *extra))
    computed_to = counted_to(conn, plan, now)
    return UsageReport(plan.start, plan.end, by, out, totals, jobs, rates.currency, computed_to, plan.hours_only)


def fresh_columns(conn: Connection[Any], plan: WindowPlan, now: datetime) -> dict[str, list[Any]]:
    """The parts of an hour, computed from the minute rollups as usage_1h's rows are (each row in its hour,
    for the grid), as one array per column: the report's fresh_* parameters."""
    rows = []
    for piece in plan.pieces:
        found = conn.execute(HOUR_ROWS, usage_params(piece.start, piece.end, now)).fetchall()
        rows += [(floor_hour(piece.start), *row[1:]) for row in found]
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(USAGE_COLUMNS)
    return {f"fresh_{name}": list(values) for name, values in zip(USAGE_COLUMNS, columns, strict=True)}


def counted_to(conn: Connection[Any], plan: WindowPlan, now: datetime) -> datetime | None:
    """Up to when the usage counted is current: the whole hours as the collector last computed them, the
    parts computed now up to now; None when none of the window was computed."""
    times = [min(piece.end, now) for piece in plan.pieces]
    if plan.hours is not None:
        row = conn.execute(
            "SELECT max(least(computed_at, bucket + interval '1 hour')) FROM usage_hour"
            " WHERE bucket >= %s AND bucket < %s",
            (plan.hours.start, plan.hours.end),
        ).fetchone()
        times += [row[0]] if row and row[0] is not None else []
    return max(times, default=None)


def figures_from_sums(sums: list[Any] | None) -> Figures:
    """Figures from sums in seconds and joules: allocated, measured, active, active on SM activity, tensor,
    idle, energy, energy-from-counter seconds, energy x g/kWh, price x seconds (None: no price), unpriced;
    None: all zero."""
    allocated, measured, active, active_sm, tensor, idle, joules, counter_s, joules_g, cost, unpriced = sums or [
        0.0
    ] * 9 + [None, 0.0]
    return Figures(
        gpu_hours_allocated=(allocated or 0) / 3600,
        gpu_hours_measured=(measured or 0) / 3600,
        gpu_hours_active=(active or 0) / 3600,
        gpu_hours_tensor_active=(tensor or 0) / 3600,
        gpu_hours_idle=(idle or 0) / 3600,
        energy_kwh=(joules or 0) / JOULES_PER_KWH,
        cost=None if cost is None else cost / 3600,
        co2_kg=(joules_g or 0) / JOULES_PER_KWH / 1000,
        unpriced_gpu_hours=(unpriced or 0) / 3600,
        active_basis=active_basis(measured or 0, active_sm or 0),
        energy_from_counter=(counter_s or 0) / measured if measured else 0.0,
    )


def active_basis(measured_s: float, sm_s: float) -> ActiveBasis:
    if measured_s <= 0:
        return "none"
    share = sm_s / measured_s
    return "sm_active" if share >= 0.99 else "util" if share <= 0.01 else "mixed"
