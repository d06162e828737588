"""The reports API: usage by user, account, partition, namespace, model or job (read token), one job's
report (jobstats), what stragglers cost by job, node, cause or user (read token), and the grid's carbon
intensity, read with the read token and loaded with the admin token."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Path, Query
from pydantic import AwareDatetime, BaseModel, Field

from gpuscope.collector.api.deps import ReadPoolDep, WritePoolDep, require_admin_token, require_read_token
from gpuscope.collector.api.params import TimeRangeDep
from gpuscope.collector.api.responses import error
from gpuscope.collector.query.jobstats import JobReport, job_report
from gpuscope.collector.query.usage import Dimension, Rates, UsageReport, usage_report
from gpuscope.stragglers.cost import CostDimension, straggler_cost

MAX_GRID_POINTS = 100_000  # about 11 years of hourly values


def usage_json(report: UsageReport) -> dict[str, Any]:
    rows = []
    for row in report.rows:
        out: dict[str, Any] = {"key": row.key, **row.figures.as_json(), "jobs": row.jobs}
        if report.by == "job":
            out |= {"user": row.user, "account": row.account, "partition": row.partition, "namespace": row.namespace}
        rows.append(out)
    return {
        "start": report.start,
        "end": report.end,
        "by": report.by,
        "currency": report.currency,
        "computed_to": report.computed_to,
        "hours_only": [{"start": span.start, "end": span.end} for span in report.hours_only],
        "rows": rows,
        "totals": {**report.totals.as_json(), "jobs": report.jobs},
    }


def job_json(report: JobReport, currency: str | None = None) -> dict[str, Any]:
    return {
        "job": report.job,
        "user": report.user,
        "account": report.account,
        "partition": report.partition,
        "namespace": report.namespace,
        "start": report.start,
        "end": report.end,
        "gpus": report.gpus,
        **report.figures.as_json(),
        "currency": currency,
        "per_gpu": [
            {"node": g.node, "gpu": g.gpu, "mig_profile": g.mig_profile, "model": g.model, "start": g.start,
             "end": g.end, "allocated_hours": g.allocated_hours, "active_hours": g.active_hours,
             "idle_hours": g.idle_hours, "util_mean_pct": g.util_mean_pct,
             "sm_active_mean_pct": g.sm_active_mean_pct, "tensor_active_mean_pct": g.tensor_active_mean_pct,
             "mem_max_bytes": g.mem_max_bytes, "power_mean_w": g.power_mean_w, "energy_kwh": g.energy_kwh}
            for g in report.per_gpu
        ],
    }  # fmt: skip


class GridPoint(BaseModel):
    ts: AwareDatetime
    g_per_kwh: float = Field(ge=0, lt=10000, description="grams of CO2 per kWh, from this time on")


def reports_router(rates: Rates) -> APIRouter:
    router = APIRouter(prefix="/api/v1/reports", tags=["reports"])

    @router.get("/usage", dependencies=[Depends(require_read_token)])
    def get_usage(pool: ReadPoolDep, span: TimeRangeDep, by: Dimension = "user") -> dict[str, Any]:
        """GPU-hours allocated, active (SM activity where the GPU has it: see active_basis) and held idle,
        energy, cost and carbon by `by`, over the range to the minute (start and end say which). Where the
        minute rollups at an edge are gone (past their retention), that edge counts its whole hour from the
        hourly figures: `hours_only` lists those hours, and start or end takes the hour's edge. Rows hold every
        job, so they add up to the totals; a job without the key is in the row keyed null."""
        with pool.connection() as conn:
            return usage_json(usage_report(conn, span, by, rates))

    @router.get(
        "/jobs/{job_id}", dependencies=[Depends(require_read_token)], responses={404: error("No job has this id")}
    )
    def get_job_report(pool: ReadPoolDep, job_id: Annotated[str, Path(max_length=400)]) -> dict[str, Any]:
        """One job's report over its whole life, per GPU it held (what `gpuscope jobstats` prints)."""
        with pool.connection() as conn:
            report = job_report(conn, job_id, rates)
        if report is None:
            raise HTTPException(404, f"no job {job_id!r}")
        return job_json(report, rates.currency)

    @router.get("/stragglers", dependencies=[Depends(require_read_token)])
    def get_straggler_cost(pool: ReadPoolDep, span: TimeRangeDep, by: CostDimension = "job") -> dict[str, Any]:
        """What stragglers cost over the range, by `by`: straggler episodes, jobs hit and the GPU-hours
        lost (the GPUs a job held x how long it ran slowed x slowdown / (1 + slowdown): the time beyond
        its normal pace), counting the part of each episode inside the range. Most costly first."""
        with pool.connection() as conn:
            report = straggler_cost(conn, span, by)
        return {
            "start": span.start,
            "end": span.end,
            "by": by,
            "rows": [vars(row) for row in report.rows],
            "totals": {"episodes": report.episodes, "gpu_hours_lost": report.gpu_hours_lost},
        }

    @router.get("/grid", dependencies=[Depends(require_read_token)])
    def get_grid(pool: ReadPoolDep, limit: Annotated[int, Query(ge=1, le=MAX_GRID_POINTS)] = 1000) -> dict[str, Any]:
        """The loaded grid intensity series (newest first), and the constant used where it has no value."""
        with pool.connection() as conn:
            rows = conn.execute(
                "SELECT ts, g_per_kwh FROM grid_intensity ORDER BY ts DESC LIMIT %s", (limit,)
            ).fetchall()
        return {"default_g_per_kwh": rates.grid_g_per_kwh, "points": [{"ts": t, "g_per_kwh": g} for t, g in rows]}

    @router.put("/grid", dependencies=[Depends(require_admin_token)])
    async def put_grid(
        pool: WritePoolDep, points: Annotated[list[GridPoint], Field(max_length=MAX_GRID_POINTS)]
    ) -> dict[str, int]:
        """Load grid intensity values (each holds from its time until the next); a time already loaded
        takes the new value."""
        if len({p.ts for p in points}) != len(points):
            raise HTTPException(422, "a time appears twice")
        async with pool.connection() as conn, conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO grid_intensity (ts, g_per_kwh) VALUES (%s, %s)"
                " ON CONFLICT (ts) DO UPDATE SET g_per_kwh = EXCLUDED.g_per_kwh",
                [(p.ts, p.g_per_kwh) for p in points],
            )
        return {"loaded": len(points)}

    return router
