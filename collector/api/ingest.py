"""POST /api/v1/samples: the exporters' push endpoint (format: docs/ingest-format.md)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time

import orjson
import psycopg
import psycopg_pool
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from gpuscope.collector.api.auth import ANY_NODE
from gpuscope.collector.api.deps import IngestStateDep
from gpuscope.collector.api.responses import BEARER, RETRY_AFTER, IngestRefusalOut, error
from gpuscope.collector.ingest.schema import CONTENT_ENCODING, REQUEST_BODY
from gpuscope.collector.ingest.wire import Batch, IngestError, body_rules, decode_body
from gpuscope.collector.store.availability import Cause
from gpuscope.collector.store.group_writer import DatabaseAway, WriteDeadline

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["ingest"])

WRITE_SLOT_WAIT_S = 5.0
RETRY_AFTER_S = "2"
# A body as sent up to this size, not compressed, is decoded on the event loop (a few milliseconds at
# most); anything larger, or gzip, in a worker thread, so that other requests are served meanwhile.
DECODE_INLINE_BYTES = 256 * 1024


class IngestOut(BaseModel):
    duplicate: bool  # a retry of a batch already stored: nothing stored again
    gpu_rows: int
    port_rows: int
    mig_rows: int  # rows of MIG devices (docs/ingest-format.md, "MIG devices")
    ignored_fields: list[str]  # fields this collector does not know (a newer exporter's), left out


@router.post(
    "/samples",
    summary="Push a batch of samples (gpuscope-samples v1 JSON or v2 binary, optionally gzip-encoded)",
    description="The format, every rule and limit: docs/ingest-format.md. Authorization: Bearer, a shared"
    " ingest token or the node's own token (valid for that cluster and node only).",
    # Refusals of the batch itself answer a list in `detail` (IngestRefusalOut); the others a sentence.
    responses={
        200: {"model": IngestOut, "description": "Stored durably (or recognised as a retry of a stored batch)"},
        400: error(
            "Body is not UTF-8 JSON, not complete gzip, or a version 2 body of the wrong layout", IngestRefusalOut
        ),
        401: error("Missing or wrong bearer token", headers=BEARER),
        403: error("A node's token used for another node or cluster; `detail[].loc` names which", IngestRefusalOut),
        413: error("Body, decompressed body, JSON text or row count over its limit", IngestRefusalOut),
        415: error("Unsupported Content-Type or Content-Encoding", IngestRefusalOut),
        422: error("A field breaks a rule; `detail[].loc` names it", IngestRefusalOut),
        500: error("The database refused the batch; nothing was stored"),
        503: error(
            "Saturated, or the database is away: `detail` names the cause (database unreachable, database"
            " restarting, disk full); nothing was stored; retry after Retry-After seconds",
            headers=RETRY_AFTER,
        ),
    },
    # The route reads its body itself (FastAPI parses nothing): this only documents it.
    openapi_extra={"requestBody": REQUEST_BODY, "parameters": [CONTENT_ENCODING]},
)
async def push_samples(request: Request, state: IngestStateDep) -> Response:
    started = time.perf_counter()
    allowed = state.auth.identify(request.headers.get("authorization"))
    if allowed is None:
        state.metrics.batches.labels("unauthorized").inc()
        return JSONResponse(
            {"detail": "missing or invalid bearer token"}, status_code=401, headers={"WWW-Authenticate": "Bearer"}
        )
    try:
        batch = await _decode(request, state, scope=None if allowed == ANY_NODE else allowed)
    except IngestError as exc:
        state.metrics.batches.labels("forbidden" if exc.status == 403 else "rejected").inc()
        log.info("rejected batch from %s: %s", request.client.host if request.client else "?", exc)
        return JSONResponse({"detail": exc.detail()}, status_code=exc.status)
    except TimeoutError:
        state.metrics.batches.labels("saturated").inc()
        return _unavailable("decoding saturated")

    if (away := state.database.refuses_writes()) is not None:
        state.metrics.batches.labels("db_unavailable").inc()
        return _unavailable(away.reason)
    try:
        if state.write_slots.locked():  # wait_for costs a task per call: only when there is a wait
            await asyncio.wait_for(state.write_slots.acquire(), WRITE_SLOT_WAIT_S)
        else:
            await state.write_slots.acquire()
    except TimeoutError:
        state.metrics.batches.labels("saturated").inc()
        return _unavailable("write path saturated")
    try:
        result = await state.writer.submit(batch)
    except WriteDeadline as exc:  # the batch may still commit: the exporter's retry (same seq) is then a duplicate
        state.metrics.batches.labels("db_unavailable").inc()
        return _unavailable(f"database not answering: {exc}")
    except asyncio.CancelledError:  # the server is stopping and gave up on this request
        state.metrics.batches.labels("db_unavailable").inc()
        return _unavailable("collector shutting down")
    except DatabaseAway as exc:  # the database went away while the batch waited: not tried
        state.metrics.batches.labels("db_unavailable").inc()
        return _unavailable(str(exc))
    except (psycopg.Error, psycopg_pool.PoolTimeout) as exc:
        availability = state.database.current()
        if not availability.ok:  # away, full or a standby: the watch logged it once, not every batch
            outcome = "disk_full" if availability.cause is Cause.DISK_FULL else "db_unavailable"
            state.metrics.batches.labels(outcome).inc()
            return _unavailable(availability.reason)
        if isinstance(exc, psycopg.OperationalError | psycopg_pool.PoolTimeout):
            # not about availability (a lost lock conflict): nothing stored, worth a retry
            state.metrics.batches.labels("db_unavailable").inc()
            log.warning("storing a batch failed: %s", exc)
            return _unavailable(f"database error, retry: {exc}")
        state.metrics.batches.labels("db_error").inc()
        log.exception("storing a batch failed; the transaction was rolled back")
        return JSONResponse({"detail": "database error; nothing was stored"}, status_code=500)
    finally:
        state.write_slots.release()

    metrics = state.metrics
    (metrics.duplicate if result.duplicate else metrics.stored).inc()
    metrics.gpu_rows.inc(result.gpu_rows)
    metrics.port_rows.inc(result.port_rows)
    metrics.mig_rows.inc(result.mig_rows)
    metrics.seconds.observe(time.perf_counter() - started)
    answer = {
        "duplicate": result.duplicate,
        "gpu_rows": result.gpu_rows,
        "port_rows": result.port_rows,
        "mig_rows": result.mig_rows,
        "ignored_fields": list(batch.ignored_fields),
    }
    return Response(orjson.dumps(answer), media_type="application/json")


async def _decode(request: Request, state: IngestStateDep, scope: tuple[str, str] | None) -> Batch:
    """The request's batch, decoded and checked (IngestError otherwise). Large or compressed bodies are
    decoded in a worker thread, at most state.decode_slots at a time (TimeoutError: none came free)."""
    headers = request.headers
    # 415s before reading any of the body; the limits it is read and decoded under (body_rules.py)
    rules = body_rules(headers.get("content-type"), headers.get("content-encoding"), state.max_body_bytes)
    body = await _read_body(request, rules.max_sent_bytes)
    now = time.time()
    decode = functools.partial(decode_body, body, rules=rules, now=now, oldest=now - state.retention_s, scope=scope)
    if rules.encoding == "identity" and len(body) <= DECODE_INLINE_BYTES:
        return decode()
    if state.decode_slots.locked():
        await asyncio.wait_for(state.decode_slots.acquire(), WRITE_SLOT_WAIT_S)
    else:
        await state.decode_slots.acquire()
    loop = asyncio.get_running_loop()

    def decode_then_free_the_slot() -> Batch:
        try:
            return decode()
        finally:  # from the thread, when it is done: a request cancelled meanwhile does not free it early
            loop.call_soon_threadsafe(state.decode_slots.release)

    return await asyncio.to_thread(decode_then_free_the_slot)


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
