"""One job's usage report (gpuscope jobstats): per GPU it held, utilisation, SM and tensor activity, peak
memory, power and energy, and the job's figures as the usage report counts them, computed afresh from the
minute rollups over its whole life (collector/store/usage.py) so a running job is current to the minute."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from psycopg import Connection

from gpuscope.collector.query.usage import JOULES_PER_KWH, Figures, Rates, figures_from_sums, intensity_at
from gpuscope.collector.store.usage import PER_GPU_SELECT, usage_params


@dataclass(frozen=True)
class GpuUsage:
    node: str
    gpu: int  # the board's index on its node
    mig_profile: str | None  # a MIG device: its GPU instance's profile
    model: str
    start: datetime
    end: datetime | None  # None: still held
    allocated_hours: float
    active_hours: float
    idle_hours: float
    util_mean_pct: float | None  # None: no reading (MIG devices have no utilisation)
    sm_active_mean_pct: float | None
    tensor_active_mean_pct: float | None
    mem_max_bytes: int | None
    power_mean_w: float | None  # the board's, for a MIG device
    energy_kwh: float  # a MIG device: its share of the board's


@dataclass(frozen=True)
class JobReport:
    job: str
    user: str | None
    account: str | None
    partition: str | None
    namespace: str | None
    start: datetime
    end: datetime | None  # None: running
    gpus: int  # GPUs (and MIG devices) it held
    figures: Figures
    per_gpu: list[GpuUsage]


_MEMORY = (
    "SELECT a.allocation_id, CASE WHEN a.mig_id IS NULL THEN"
    "   (SELECT max(fb_used_bytes) FROM gpu_sample s WHERE s.gpu_id = a.gpu_id AND s.ts >= a.started_at"
    "    AND s.ts < coalesce(a.ended_at, %(now)s))"
    "  ELSE (SELECT max(fb_used_bytes) FROM mig_sample s WHERE s.mig_id = a.mig_id AND s.ts >= a.started_at"
    "    AND s.ts < coalesce(a.ended_at, %(now)s)) END"
    " FROM job_allocation a WHERE a.job_id = %(job)s"
)
# PER_GPU_SELECT's columns the job's figures add up, in figures_from_sums' order: seconds held, measured,
# active, active on SM activity, tensor-active and idle, joules, and seconds with the energy counter.
_SUMMED = (13, 14, 15, 16, 17, 19, 20, 21)
# The grid intensity the job's energy met: each hour's energy (usage_1h) weighted by that hour's intensity.
_GRID = (
    f"SELECT sum(u.energy_j * {intensity_at('u.bucket')}) / nullif(sum(u.energy_j), 0),"  # noqa: S608 (constants)
    f" {intensity_at('%(start)s')} FROM usage_1h u WHERE u.job_id = %(job)s"
)


def job_report(
    conn: Connection[Any], job_id: str, rates: Rates | None = None, now: datetime | None = None
) -> JobReport | None:
    """The job's report; None for a job the store does not know."""
    rates, now = rates or Rates(), now or datetime.now(UTC)
    span = conn.execute(
        "SELECT min(started_at), max(coalesce(ended_at, greatest(%s, started_at))), bool_or(ended_at IS NULL)"
        " FROM job_allocation WHERE job_id = %s",
        (now, job_id),
    ).fetchone()
    if span is None or span[0] is None:
        return None
    start, end, running = span
    # Planned per call (collector/store/usage.py says why): pooled connections would otherwise prepare it.
    rows = conn.execute(PER_GPU_SELECT, usage_params(start, end, now, job_id), prepare=False).fetchall()
    memory = dict(conn.execute(_MEMORY, {"job": job_id, "now": now}).fetchall())
    grid = conn.execute(_GRID, {"job": job_id, "grid": rates.grid_g_per_kwh, "start": start}).fetchone()
    g_per_kwh = grid[0] if grid and grid[0] is not None else grid[1] if grid else rates.grid_g_per_kwh
    per_gpu = []
    totals = [0.0] * len(_SUMMED)
    unpriced = 0.0
    priced: float | None = None  # price x seconds held, over the GPUs whose model has a price
    for row in rows:
        alloc_id, node, index, _, profile, model, *_, lo, hi, _share, held = row[:14]
        active, _, _, _, idle, joules = row[15:21]
        util_mean, sm_mean, tensor_mean, power_mean = row[22:26]
        totals = [total + row[i] for total, i in zip(totals, _SUMMED, strict=True)]
        price = rates.price(model)
        if price is None:
            unpriced += held
        else:
            priced = (priced or 0.0) + held * price
        per_gpu.append(
            GpuUsage(
                node=node,
                gpu=index,
                mig_profile=profile,
                model=model,
                start=lo,
                end=None if hi == now and running else hi,
                allocated_hours=held / 3600,
                active_hours=active / 3600,
                idle_hours=idle / 3600,
                util_mean_pct=util_mean,
                sm_active_mean_pct=sm_mean,
                tensor_active_mean_pct=tensor_mean,
                mem_max_bytes=memory.get(alloc_id),
                power_mean_w=power_mean,
                energy_kwh=joules / JOULES_PER_KWH,
            )
        )
    first = rows[0] if rows else None
    joules = totals[6]
    figures = figures_from_sums([*totals, joules * g_per_kwh, priced, unpriced])
    return JobReport(
        job=job_id,
        user=first[6] if first else None,
        account=first[7] if first else None,
        partition=first[8] if first else None,
        namespace=first[9] if first else None,
        start=start,
        end=None if running else end,
        gpus=len({(r[1], r[2], r[4]) for r in rows}),
        figures=figures,
        per_gpu=per_gpu,
    )
