"""What each page shows, loaded through the query layer, one short read per refresh."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import numpy as np
from psycopg_pool import ConnectionPool

from gpuscope.alerts import reads as alert_reads
from gpuscope.collector import query
from gpuscope.collector.query.buckets import chart_bucket, chart_buckets
from gpuscope.collector.query.node_minutes import MINUTE_S, GroupMinutes, answers, group_minutes
from gpuscope.collector.query.rack_nodes import RackJob, RackNode, rack_nodes
from gpuscope.collector.query.rack_power import NEAR_BUDGET
from gpuscope.dashboard import time_ranges
from gpuscope.dashboard.grid import Grid, GridRow, Level, choose_level, to_grid, with_jobs
from gpuscope.dashboard.scales import scale_of
from gpuscope.stragglers import reads as straggler_reads

RANGES_S = time_ranges.PRESETS_S
HEATMAP_MAX_COLUMNS = 180
POWER_MAX_POINTS = 240
SERIES_MAX_POINTS = 240
OVERVIEW_GPU_ROWS_MAX = 256


def time_range(range_key: str) -> query.TimeRange:
    """A preset or a custom span (dashboard/time_ranges.py); ValueError in words."""
    return time_ranges.parse(range_key)


@dataclass(frozen=True)
class RackLoad:
    rack: str  # "cluster/rack"
    current_kw: float
    budget_kw: float

    @property
    def share(self) -> float:
        return self.current_kw / self.budget_kw


@dataclass(frozen=True)
class Attention:
    """What needs looking at first: firing alerts (most severe first), active stragglers, unhealthy GPUs
    (silent ones among them), racks near their power budget."""

    alerts: list[alert_reads.AlertRow]
    stragglers: list[straggler_reads.StragglerRow]
    gpus_silent: int
    unhealthy: list[query.UnhealthyGpu] = field(default_factory=list)
    racks_near_budget: list[RackLoad] = field(default_factory=list)


@dataclass(frozen=True)
class OverviewData:
    summary: query.FleetSummary
    attention: Attention
    heatmap: Grid
    rack_power: query.RackPower
    energy_kwh: float | None  # the fleet's, over the range: the rack power chart's area
    idle_jobs: list[str] = field(default_factory=list)  # who holds the idle GPUs (two at most: one, or several)


OVERVIEW_METRIC = "sm_active_pct"  # real work; utilisation reads ~100% for a rank spinning in NCCL
FALLBACK_METRIC = "util_pct"  # GPUs without SM activity (no DCGM profiling) report only utilisation
POWER_METRIC = "power_w"


def load_overview(
    pool: ConnectionPool[Any], range_key: str, budgets_kw: dict[str, float] | None = None
) -> OverviewData:
    window = time_range(range_key)
    with pool.connection() as conn:
        summary, unhealthy, idle_jobs = query.fleet_overview(conn)  # the GPUs' latest samples read once
        firing = alert_reads.alerts(conn, "firing", limit=200)
        stragglers = straggler_reads.stragglers(conn, window, active_only=True, limit=50)
        # At a glance: node rows once the fleet outgrows a screen of GPU rows (the heatmap page has GPUs).
        level = "auto" if summary.gpus_known <= OVERVIEW_GPU_ROWS_MAX else "node"
        grid_bucket, power_bucket = rollup_buckets(conn, window, HEATMAP_MAX_COLUMNS, POWER_MAX_POINTS)
        chosen = choose_level(summary.gpus_known, summary.nodes_known, len(window.buckets(grid_bucket)), level)
        # One read of the node tier answers the grid and the racks' power where both are minutes.
        power_too = (POWER_METRIC,) if answers(POWER_METRIC, power_bucket) else ()
        minutes = _tier_minutes(conn, OVERVIEW_METRIC, window, grid_bucket, chosen, power_too)
        if minutes is not None:
            grid = _tier_grid(minutes, OVERVIEW_METRIC)
        else:
            grid = _grid_or_fallback(
                conn, OVERVIEW_METRIC, window, grid_bucket, level, summary.gpus_known, summary.nodes_known
            )
        if minutes is not None and power_too:
            power = minutes.rack_power(POWER_METRIC)
        else:
            power = query.rack_power(conn, window, power_bucket)
        nameplate = query.rack_nameplate_w(conn)
    loads = rack_loads(power, budgets_kw or {}, nameplate)
    near = sorted((load for load in loads if load.share >= NEAR_BUDGET), key=lambda load: -load.share)
    silent = summary.gpus_known - summary.gpus_reporting
    attention = Attention(firing, stragglers, silent, unhealthy, near)
    return OverviewData(summary, attention, grid, power, energy_kwh(power), idle_jobs)


def energy_kwh(power: query.RackPower) -> float | None:
    """Energy drawn over the chart's range, from its mean power per bucket; a missing bucket adds nothing."""
    if not np.isfinite(power.watts).any():
        return None
    return float(np.nansum(power.watts)) * power.bucket_s / 3.6e6


def rack_loads(power: query.RackPower, budgets_kw: dict[str, float], nameplate_w: dict[str, float]) -> list[RackLoad]:
    """Each rack's current power against its budget: configured ("cluster/rack" or "rack"), else the sum
    of its GPUs' power limits. Current: the larger of its two newest readings, because the newest bucket
    may still be filling (GPUs whose samples have not arrived yet are missing from its sum, which reads
    low, never high). Racks with neither reading nor budget are left out."""
    loads = []
    for rack, watts in zip(power.racks, power.watts, strict=True):
        current = current_kw(watts)
        budget = _budget_kw(rack, budgets_kw, nameplate_w)
        if current is not None and budget:
            loads.append(RackLoad(rack, current, budget))
    return loads


def current_kw(watts: np.ndarray) -> float | None:
    """A rack's draw now (rack_loads says why the larger of its two newest readings)."""
    seen = watts[~np.isnan(watts)]
    return float(seen[-2:].max()) / 1000 if seen.size else None


def load_grid(pool: ConnectionPool[Any], metric: str, range_key: str, level: str) -> Grid:
    """`metric`'s grid; for SM activity where no GPU reports it, utilisation's (the grid's `metric` says)."""
    window = time_range(range_key)
    with pool.connection() as conn:
        gpus, nodes = query.inventory_counts(conn)
        bucket = rollup_bucket(conn, window, HEATMAP_MAX_COLUMNS)
        return _grid_or_fallback(conn, metric, window, bucket, level, gpus, nodes)


def _grid_or_fallback(
    conn: Any, metric: str, window: query.TimeRange, bucket: int, level: str, gpus: int, nodes: int
) -> Grid:
    chosen = choose_level(gpus, nodes, len(window.buckets(bucket)), level)
    minutes = _tier_minutes(conn, metric, window, bucket, chosen)
    if minutes is not None:
        return _tier_grid(minutes, metric)
    grid = _grid(conn, metric, window, bucket, level, gpus, nodes)
    if metric == OVERVIEW_METRIC and grid.rows and not np.isfinite(grid.values).any():
        grid = _grid(conn, FALLBACK_METRIC, window, bucket, level, gpus, nodes)
    return grid


def _tier_minutes(
    conn: Any, metric: str, window: query.TimeRange, bucket: int, level: Level, also: tuple[str, ...] = ()
) -> GroupMinutes | None:
    """Node or rack rows of `metric` (and its fallback's, and `also`) from the node tier, where it answers
    them exactly: rows of several GPUs summed up by their mean, at one-minute buckets; None elsewhere."""
    if level == "gpu" or scale_of(metric).rows != "mean" or not answers(metric, bucket):
        return None
    fallback = (FALLBACK_METRIC,) if metric == OVERVIEW_METRIC else ()
    return group_minutes(conn, list(dict.fromkeys((metric, *fallback, *also))), window, level)


def _tier_grid(minutes: GroupMinutes, metric: str) -> Grid:
    """The grid of `metric`; for SM activity where no row has any, utilisation's (as _grid_or_fallback)."""
    values = minutes.mean(metric)
    if metric == OVERVIEW_METRIC and minutes.rows and not np.isfinite(values).any():
        metric, values = FALLBACK_METRIC, minutes.mean(FALLBACK_METRIC)
    rows = [
        GridRow(f"{r.rack}/{r.node}" if r.node else r.rack, f"{r.cluster}/{r.rack}", r.node, None, r.gpus)
        for r in minutes.rows
    ]
    return Grid(metric, MINUTE_S, minutes.level, rows, minutes.times, values)


def rollup_bucket(conn: Any, window: query.TimeRange, max_points: int) -> int:
    return rollup_buckets(conn, window, max_points)[0]


def rollup_buckets(conn: Any, window: query.TimeRange, *max_points: int) -> tuple[int, ...]:
    """A width per chart of the window, preferring the rollups (the bucket policy, query/buckets.py:
    whole minutes from an hour up; below, never narrower than the samples fill)."""
    return chart_buckets(conn, window, *max_points, prefer_rollups=True)


def _grid(conn: Any, metric: str, window: query.TimeRange, bucket: int, level: str, gpus: int, nodes: int) -> Grid:
    """The heatmap at `level`; the query layer picks its source (the minute rollup read as it is and
    widened, for buckets of several minutes: query/buckets.py read_width)."""
    chosen = choose_level(gpus, nodes, len(window.buckets(bucket)), level)
    return _with_jobs(conn, to_grid(query.heatmap(conn, metric, window, bucket), chosen))


def _with_jobs(conn: Any, grid: Grid) -> Grid:
    return with_jobs(grid, lambda gpu_ids: query.held_by(conn, gpu_ids, grid.times, grid.bucket_s))


@dataclass(frozen=True)
class PowerData:
    rack_power: query.RackPower
    racks: list[str]
    current_kw: list[float | None]
    budget_kw: list[float | None]


def load_power(pool: ConnectionPool[Any], range_key: str, budgets_kw: dict[str, float]) -> PowerData:
    window = time_range(range_key)
    with pool.connection() as conn:
        power = query.rack_power(conn, window, rollup_bucket(conn, window, POWER_MAX_POINTS))
        nameplate = query.rack_nameplate_w(conn)
    current = [current_kw(watts) for watts in power.watts]
    budgets = [_budget_kw(rack, budgets_kw, nameplate) for rack in power.racks]
    return PowerData(power, power.racks, current, budgets)


@dataclass(frozen=True)
class RackView:
    rack: str  # "cluster/rack"
    nodes: list[RackNode]
    jobs: list[RackJob]
    budget_kw: float | None


def load_rack(pool: ConnectionPool[Any], rack: str, budgets_kw: dict[str, float]) -> RackView | None:
    """One rack's nodes and jobs now; None when no rack of that name ("cluster/rack") is known."""
    cluster, _, name = rack.partition("/")
    with pool.connection() as conn:
        nodes, jobs = rack_nodes(conn, cluster, name)
        nameplate = query.rack_nameplate_w(conn) if nodes else {}
    return RackView(rack, nodes, jobs, _budget_kw(rack, budgets_kw, nameplate)) if nodes else None


def _budget_kw(rack: str, budgets_kw: dict[str, float], nameplate_w: dict[str, float]) -> float | None:
    configured = budgets_kw.get(rack, budgets_kw.get(rack.split("/", 1)[-1]))
    if configured is not None:
        return configured
    return nameplate_w[rack] / 1000 if rack in nameplate_w else None


@dataclass(frozen=True)
class JobData:
    job: query.JobRow | None
    grid: Grid
    stragglers: list[straggler_reads.StragglerRow]
    mig: list[query.JobGpu] = field(default_factory=list)  # the MIG devices it held, with their own usage


def load_job(pool: ConnectionPool[Any], job_id: str, metric: str, range_key: str) -> JobData:
    with pool.connection() as conn:
        job = query.job(conn, job_id)
        if job is None:
            return JobData(None, Grid(metric, 60, "gpu", [], [], _empty()), [])
        end = job.ended_at or query.last(0.001).end
        window = query.TimeRange(max(job.started_at, end - _seconds(range_key)), end)
        bucket = rollup_bucket(conn, window, HEATMAP_MAX_COLUMNS)
        gpu_ids = query.select_gpus(conn, job=job_id)
        heatmap = query.heatmap(conn, metric, window, bucket, gpu_ids)
        stragglers = straggler_reads.stragglers(conn, query.TimeRange(job.started_at, end), job=job_id)
        mig = [held for held in query.job_gpus(conn, job_id) if held.mig is not None] if job.mig_devices else []
        grid = _with_jobs(conn, to_grid(heatmap, "gpu"))
    return JobData(job, grid, stragglers, mig)


@dataclass(frozen=True)
class NodeData:
    series: query.Series
    events: list[query.EventRow]
    nic: query.NicSeries | None
    latest_reasons: dict[int, int]  # GPU index -> clock event reasons in the newest bucket
    memory_total_bytes: int | None = None  # the largest of its GPUs' sizes: the memory chart's top
    jobs: np.ndarray | None = None  # (series rows, times): who held each GPU in each bucket


NODE_METRICS = ("util_pct", "sm_active_pct", "tensor_active_pct", "temp_c", "power_w", "sm_clock_mhz", "fb_used_bytes")


REASONS_SPAN = timedelta(minutes=2)  # "now" for clock event reasons: the newest minute bucket with samples


def _newest_reasons(seen: query.Throttling | None) -> int:
    return next((r for r in reversed(seen.reasons) if r is not None), 0) if seen else 0


def load_node(pool: ConnectionPool[Any], node: str, gpu: int | None, range_key: str) -> NodeData | None:
    window = time_range(range_key)
    with pool.connection() as conn:
        bucket = chart_bucket(conn, window, SERIES_MAX_POINTS)
        gpu_ids = query.select_gpus(conn, node=node)
        if not gpu_ids:
            return None
        series = query.series(conn, NODE_METRICS, window, bucket, gpu_ids)
        if gpu is not None:
            keep = [i for i, row in enumerate(series.rows) if row.gpu_index == gpu]
            series = query.Series(
                series.bucket_s,
                [series.rows[i] for i in keep],
                series.times,
                {m: v[keep] for m, v in series.values.items()},
            )
        events = query.events(conn, window, node=node, limit=200)
        ports = query.select_ports(conn, nodes=[node])
        nic = query.nic_series(conn, "xmit_bytes", window, bucket, ports) if ports else None
        totals = query.memory_totals(conn, [row.gpu_id for row in series.rows])
        # Every reason set in the newest minute: bit masks OR'd, since a mean of masks names reasons that
        # no sample gave (half the samples at HW thermal 0x40 average to SW thermal 0x20).
        recent = query.TimeRange(max(window.start, window.end - REASONS_SPAN), window.end)
        throttled = query.throttling(conn, [row.gpu_id for row in series.rows], recent, 60)
        jobs = query.held_by(conn, [row.gpu_id for row in series.rows], series.times, series.bucket_s)
    reasons = {row.gpu_index: _newest_reasons(throttled.get(row.gpu_id)) for row in series.rows}
    return NodeData(series, events, nic, reasons, max(totals.values(), default=None), jobs)


@dataclass(frozen=True)
class AlertsData:
    active: list[alert_reads.AlertRow]
    resolved: list[alert_reads.AlertRow]
    notifications: list[alert_reads.NotificationRow]
    silences: list[Any]
    rules: list[alert_reads.RuleStatus]


def load_alerts(pool: ConnectionPool[Any]) -> AlertsData:
    with pool.connection() as conn:
        return AlertsData(
            active=alert_reads.alerts(conn, "active", limit=500),
            resolved=alert_reads.alerts(conn, "resolved", limit=50),
            notifications=alert_reads.notifications(conn, limit=50),
            silences=alert_reads.silences(conn, include_expired=False),
            rules=alert_reads.rule_status(conn),
        )


def _seconds(range_key: str) -> timedelta:
    return timedelta(seconds=RANGES_S.get(range_key, 3600))


def _empty() -> np.ndarray:
    return np.empty((0, 0))
