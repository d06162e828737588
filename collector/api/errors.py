"""Errors a request can cause, answered with what happened instead of a 500: a read cut off by the
statement timeout (503), a value the database refuses (422), no connection free in time (503), and a
request that does not validate (422; its input quoted back may hold what JSON cannot encode as UTF-8,
a lone surrogate: escaped).

Each answers {"detail": "<the reason, in a sentence>"} as the guard and the routes' own checks do, and
the OpenAPI description says so for every operation (api/responses.py, which install() sets up)."""

from __future__ import annotations

import json
import logging

from fastapi import FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg import DataError
from psycopg.errors import QueryCanceled
from psycopg_pool import PoolTimeout

from gpuscope.collector.api import responses
from gpuscope.collector.api.state import collector_state

log = logging.getLogger(__name__)

RETRY_AFTER_S = "5"


def install(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(QueryCanceled, _query_canceled)
    app.add_exception_handler(DataError, _data_error)
    app.add_exception_handler(PoolTimeout, _pool_timeout)
    responses.declare(app)


async def _query_canceled(request: Request, exc: Exception) -> JSONResponse:
    limit = collector_state(request.app).read_timeout_s
    within = f" ({limit:g} s)" if limit is not None else ""
    return JSONResponse(
        {
            "detail": f"the read ran past the statement timeout{within} and was cancelled: ask for a shorter"
            " range, a wider bucket_seconds, or fewer GPUs or metrics"
        },
        status_code=503,
        headers={"Retry-After": RETRY_AFTER_S},
    )


async def _validation_error(request: Request, exc: Exception) -> Response:
    """The reason in `detail`, a sentence like every other refusal's ("query.minutes: Input should be
    greater than or equal to 1"), and FastAPI's list of errors in `errors` (responses.InvalidOut). As
    ASCII JSON: FastAPI's default fails (a 500) on a string holding a lone surrogate ("\\ud800" in the
    body), which it quotes back but cannot encode as UTF-8."""
    errors = jsonable_encoder(exc.errors()) if isinstance(exc, RequestValidationError) else []
    reasons = "; ".join(f"{'.'.join(map(str, error.get('loc', ())))}: {error.get('msg', '')}" for error in errors)
    body = json.dumps({"detail": reasons or "the request is not valid", "errors": errors}, ensure_ascii=True)
    return Response(body, status_code=422, media_type="application/json")


async def _data_error(request: Request, exc: Exception) -> JSONResponse:
    reason = getattr(getattr(exc, "diag", None), "message_primary", None) or str(exc)
    # Mostly a value no text column holds (NUL, a bad escape); logged in case it is a query's own fault.
    log.warning("%s %r: the database refused a value: %r", request.method, request.url.path, reason)
    return JSONResponse({"detail": f"the database refused a value of this request: {reason}"}, status_code=422)


async def _pool_timeout(request: Request, exc: Exception) -> JSONResponse:
    return JSONResponse(
        {"detail": "no database connection came free in time; try again"},
        status_code=503,
        headers={"Retry-After": RETRY_AFTER_S},
    )
