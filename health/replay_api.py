"""`GET /api/v1/health/replay?policy=&start=&end=` (read token): a candidate policy over the stored
history of a window, beside what the live policy did (health/replay.py). A GET because it changes
nothing and talks to no scheduler: the policy's YAML travels in the query (`curl -G --data-urlencode
policy@candidate.yaml ...`)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query
from pydantic import AwareDatetime

from gpuscope.collector.api.deps import ReadPoolDep, require_read_token
from gpuscope.collector.api.params import MAX_RANGE
from gpuscope.collector.api.responses import error
from gpuscope.health.policy import PolicyError, policy_from_text
from gpuscope.health.replay import ReplayError, replay
from gpuscope.health.replay_data import load_history

router = APIRouter(prefix="/api/v1/health", tags=["health"])
MAX_POLICY_CHARS = 8 * 1024  # a policy is a page of YAML; the query stays within a request line's usual limits


@router.get(
    "/replay",
    dependencies=[Depends(require_read_token)],
    responses={422: error("The policy is not valid (file, key and line), the window is wrong, or it holds no data")},
)
def get_replay(
    pool: ReadPoolDep,
    policy: Annotated[str, Query(max_length=MAX_POLICY_CHARS, description="the candidate policy file's YAML")],
    start: Annotated[AwareDatetime, Query(description="the window's start (with its zone)")],
    end: Annotated[AwareDatetime, Query(description="its end")],
) -> dict[str, Any]:
    """What the candidate policy would have done over [start, end): drains, refusals by guard rail,
    GPU-hours out, jobs hit, repairs by ladder step, side by side with the live policy's record, and the
    assumptions made. The same history and policy give the same answer."""
    try:
        candidate = policy_from_text(policy)
    except PolicyError as exc:
        raise HTTPException(422, str(exc)) from None
    _check_window(start, end)
    lookback = timedelta(seconds=max(candidate.suspect_window_s, candidate.ladder_window_s))
    with pool.connection() as conn:
        history = load_history(conn, start, end, lookback)
    try:
        return replay(candidate, history, start, end).as_json()
    except ReplayError as exc:
        raise HTTPException(422, str(exc)) from None


def _check_window(start: datetime, end: datetime) -> None:
    if end <= start:
        raise HTTPException(422, f"end ({end.isoformat()}) must be after start ({start.isoformat()})")
    if end - start > MAX_RANGE:
        raise HTTPException(422, f"the window may span at most {MAX_RANGE.days} days")
