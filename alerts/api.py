"""The alerting API: alerts, rule health, notification outcomes and silences (read through reads.py),
and silences created and expired with the admin token (written by the collector)."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import BaseModel, Field, model_validator

from gpuscope.alerts import reads, store
from gpuscope.alerts.matchers import matcher_from
from gpuscope.collector.api.deps import ReadPoolDep, WritePoolDep, require_admin_token, require_read_token
from gpuscope.collector.api.responses import error

router = APIRouter(prefix="/api/v1", tags=["alerts"])


class SilenceIn(BaseModel):
    matchers: list[str | dict[str, str]] = Field(min_length=1, description="e.g. ['node=gpu-07', 'severity=~warn.*']")
    duration_s: float | None = Field(default=None, gt=0, le=366 * 86400)
    ends_at: dt.datetime | None = None
    comment: str = Field(default="", max_length=1000)
    created_by: str = Field(default="api", min_length=1, max_length=200)

    @model_validator(mode="after")
    def _one_end(self) -> SilenceIn:
        if (self.duration_s is None) == (self.ends_at is None):
            raise ValueError("give exactly one of duration_s and ends_at")
        if self.ends_at is not None and self.ends_at.tzinfo is None:
            raise ValueError("ends_at needs a time zone, e.g. 2026-11-22T18:00:00Z")
        return self


@router.get("/alerts", dependencies=[Depends(require_read_token)])
def get_alerts(
    pool: ReadPoolDep,
    state: Literal["active", "firing", "pending", "resolved", "all"] = "active",
    limit: Annotated[int, Query(ge=1, le=10000)] = 1000,
) -> list[dict[str, Any]]:
    """Alerts, firing and most severe first, each with the ids of the silences muting it."""
    with pool.connection() as conn:
        return [asdict(a) for a in reads.alerts(conn, state, limit)]


@router.get("/alerts/rules", dependencies=[Depends(require_read_token)])
def get_rules(pool: ReadPoolDep) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        return [asdict(r) for r in reads.rule_status(conn)]


@router.get("/alerts/notifications", dependencies=[Depends(require_read_token)])
def get_notifications(
    pool: ReadPoolDep,
    status: Literal["pending", "sent", "failed"] | None = None,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
) -> list[dict[str, Any]]:
    with pool.connection() as conn:
        return [asdict(n) for n in reads.notifications(conn, status, limit)]


@router.get("/silences", dependencies=[Depends(require_read_token)])
def get_silences(pool: ReadPoolDep, all: bool = False) -> list[dict[str, Any]]:
    now = dt.datetime.now(dt.UTC)
    with pool.connection() as conn:
        return [s.to_json(now) for s in reads.silences(conn, include_expired=all)]


@router.post("/silences", status_code=201, dependencies=[Depends(require_admin_token)])
async def post_silence(pool: WritePoolDep, body: SilenceIn) -> dict[str, Any]:
    try:
        matchers = [matcher_from(m) for m in body.matchers]
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from None
    now = dt.datetime.now(dt.UTC)
    ends_at = body.ends_at or now + dt.timedelta(seconds=body.duration_s or 0)
    async with pool.connection() as conn:
        try:
            silence = await store.create_silence(conn, matchers, ends_at, body.created_by, body.comment)
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
    return silence.to_json(dt.datetime.now(dt.UTC))


@router.delete(
    "/silences/{silence_id}",
    dependencies=[Depends(require_admin_token)],
    responses={404: error("No silence has this id")},
)
async def delete_silence(pool: WritePoolDep, silence_id: int) -> dict[str, Any]:
    async with pool.connection() as conn:
        silence = await store.expire_silence(conn, silence_id)
    if silence is None:
        raise HTTPException(404, f"no silence {silence_id}")
    return silence.to_json(dt.datetime.now(dt.UTC))
