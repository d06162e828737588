"""POST /api/v1/samples: the exporters' push endpoint (format: docs/ingest-format.md)."""

from __future__ import annotations

import asyncio
import logging
import time

import psycopg
import psycopg_pool
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gpuscope.collector.api.auth import ANY_NODE
from gpuscope.collector.api.deps import IngestStateDep
from gpuscope.collector.ingest.wire import IngestError, decode, decompress

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["ingest"])
INGEST_PATH = "/api/v1/samples"

WRITE_SLOT_WAIT_S = 5.0
RETRY_AFTER_S = "2"


@router.post(
    "/samples",
    summary="Push a batch of samples (gpuscope-samples v1, optionally gzip-encoded)",
    responses={
        200: {"description": "Stored durably (or recognised as a retry of a stored batch)"},
        400: {"description": "Body is not valid JSON or gzip"},
        401: {"description": "Missing or wrong bearer token"},
        403: {"description": "A per-node token used for another node"},
        413: {"description": "Body too large"},
        415: {"description": "Unsupported Content-Encoding"},
        422: {"description": "A field breaks a rule; `detail[].loc` names it"},
        503: {"description": "Saturated or database unavailable; retry after Retry-After seconds"},
    },
)
async def push_samples(request: Request, state: IngestStateDep) -> JSONResponse:
    started = time.perf_counter()
    allowed_node = state.auth.identify(request.headers.get("authorization"))
    if allowed_node is None:
        state.metrics.batches.labels("unauthorized").inc()
        return JSONResponse(
            {"detail": "missing or invalid bearer token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
        )
    try:
        body = await _read_body(request, state.max_body_bytes)
        raw = decompress(body, request.headers.get("content-encoding"), state.max_body_bytes * 8)
        now = time.time()
        batch = decode(raw, now=now, oldest=now - state.retention_s, content_type=request.headers.get("content-type"))
    except IngestError as exc:
        state.metrics.batches.labels("rejected").inc()
        log.info("rejected batch from %s: %s", request.client.host if request.client else "?", exc)
        return JSONResponse({"detail": exc.detail()}, status_code=exc.status)

    if allowed_node not in (ANY_NODE, batch.node):
        state.metrics.batches.labels("forbidden").inc()
        return JSONResponse(
            {"detail": [{"loc": ["source", "node"], "msg": "this token is not valid for that node"}]}, status_code=403
        )

    try:
        if state.write_slots.locked():  # wait_for costs a task per call: only when there is a wait
            await asyncio.wait_for(state.write_slots.acquire(), WRITE_SLOT_WAIT_S)
        else:
            await state.write_slots.acquire()
    except TimeoutError:
        state.metrics.batches.labels("saturated").inc()
        return _unavailable("write path saturated")
    try:
        result = await state.writer.store(batch)
    except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
        state.metrics.batches.labels("db_unavailable").inc()
        log.warning("database unavailable while storing a batch: %s", exc)
        return _unavailable("database unavailable")
    except psycopg.Error:
        state.metrics.batches.labels("db_error").inc()
        log.exception("storing a batch failed; the transaction was rolled back")
        return JSONResponse({"detail": "database error; nothing was stored"}, status_code=500)
    finally:
        state.write_slots.release()

    state.metrics.batches.labels("duplicate" if result.duplicate else "stored").inc()
    state.metrics.rows.labels("gpu").inc(result.gpu_rows)
    state.metrics.rows.labels("port").inc(result.port_rows)
    state.metrics.seconds.observe(time.perf_counter() - started)
    return JSONResponse(
        {
            "duplicate": result.duplicate,
            "gpu_rows": result.gpu_rows,
            "port_rows": result.port_rows,
            "ignored_fields": list(batch.ignored_fields),
        }
    )


async def _read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise IngestError(413, ("body",), f"body exceeds {limit} bytes")
    chunks = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise IngestError(413, ("body",), f"body exceeds {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _unavailable(reason: str) -> JSONResponse:
    return JSONResponse({"detail": reason}, status_code=503, headers={"Retry-After": RETRY_AFTER_S})
