"""What the collector answers besides success, in its OpenAPI description: the shape of an error, the
declarations routes share, and declare(app), which adds to every operation the answers that api/guard.py
and api/errors.py give before or around any route (so that routes of the parts, which this package does
not write, are described as they behave too).

Every error outside the ingest route is one JSON object, {"detail": "<the reason, in a sentence>"}; a
request that fails validation has `errors` too, FastAPI's list naming each field (api/errors.py). The
ingest route keeps its own shape, {"detail": [{"loc": [...], "msg": "..."}]} (docs/ingest-format.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import BaseModel, Field

from gpuscope.collector.api.guard import OPEN_PATHS, READ_METHODS

Declared = dict[int | str, dict[str, Any]]  # FastAPI's `responses=`


class ErrorOut(BaseModel):
    """A refusal or an error: why, in a sentence."""

    detail: str


class FieldErrorOut(BaseModel):
    """One rule a request broke: where (e.g. ["query", "minutes"]), what, and pydantic's name for it."""

    loc: list[str | int]
    msg: str
    type: str


class InvalidOut(ErrorOut):
    """422: the request breaks a rule. `errors` is there when the request did not validate: one entry per
    field (a check of the collector's own, e.g. an unknown metric, has only `detail`)."""

    errors: list[FieldErrorOut] = Field(default_factory=list)


class IngestProblemOut(BaseModel):
    loc: list[str | int]  # e.g. ["gpu_samples", "values", "util_pct", 3]; [] for the body as a whole
    msg: str


class IngestRefusalOut(BaseModel):
    """The ingest route's refusals of a batch (docs/ingest-format.md)."""

    detail: list[IngestProblemOut]


class HealthOut(BaseModel):
    status: Literal["ok"]


class UnhealthyOut(BaseModel):
    status: Literal["unhealthy"]
    # The cause first: "database unreachable", "database restarting" or "disk full", then the detail
    # ("disk full: 0.4 MiB free in /var/lib/gpuscope"); another failure: the error's type.
    reason: str
    cause: str  # the cause alone, for scripts: one of the three above, or "database error"
    since: str | None = None  # RFC 3339: when the collector first saw it


BEARER = {"WWW-Authenticate": {"description": "Bearer", "required": True, "schema": {"type": "string"}}}
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again",
        "required": True,
        "schema": {"type": "string"},
    }
}


def error(description: str, model: type[BaseModel] = ErrorOut, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    """One entry of a route's `responses=`: an answer in `model`'s shape (JSON)."""
    return {"model": model, "description": description} | ({"headers": headers} if headers else {})


# ---------------------------------------------------------------------------------------------------
# Every operation's answers from the guard and the error handlers (added by declare(), below).

REF = "#/components/schemas/"


def _guard_answers(
    method: str, path: str, operation: dict[str, Any], ref: Callable[[type[BaseModel]], str]
) -> Declared:
    """What api/guard.py and api/errors.py may answer to this operation (before, around or instead of it)."""

    def json_of(model: type[BaseModel]) -> dict[str, Any]:
        return {"content": {"application/json": {"schema": {"$ref": ref(model)}}}}

    answers: Declared = {
        422: {
            "description": "The request breaks a rule (a parameter or body that does not validate, a NUL byte in"
            " the URL, a value the database cannot hold): `detail` says which",
            **json_of(InvalidOut),
        }
    }
    if path not in OPEN_PATHS or method.upper() not in READ_METHODS:
        answers[401] = {"description": "No bearer token, or not one of this collector's", "headers": BEARER,
                        **json_of(ErrorOut)}  # fmt: skip
        answers[403] = {"description": "A token of this collector that is not for this (e.g. the read token for a"
                        " change)", **json_of(ErrorOut)}  # fmt: skip
    if "requestBody" in operation:
        answers[400] = {"description": "The body cannot be read (e.g. not JSON)", **json_of(ErrorOut)}
        answers[413] = {"description": "The body is over the collector's limit for it", **json_of(ErrorOut)}
    if path.startswith("/api/"):
        answers[503] = {
            "description": "A read ran past the statement timeout, or no database connection came free in time:"
            " try again after Retry-After seconds (a read: a shorter range or a wider bucket)",
            "headers": RETRY_AFTER,
            **json_of(ErrorOut),
        }
    return answers


def declare(app: FastAPI) -> None:
    """Make `app`'s OpenAPI description declare, on every operation, what the guard and the error handlers
    answer (a route's own declaration of a status wins), in place of FastAPI's 422 (a list in `detail`,
    which these answers are not)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()  # FastAPI's, which it keeps in app.openapi_schema
            _add_guard_answers(document)
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _add_guard_answers(document: dict[str, Any]) -> None:
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})

    def ref(model: type[BaseModel]) -> str:
        schema = model.model_json_schema(ref_template=REF + "{model}", mode="serialization")
        for name, nested in schema.pop("$defs", {}).items():
            schemas.setdefault(name, nested)
        schemas.setdefault(model.__name__, schema)
        return REF + model.__name__

    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            responses: dict[str, Any] = operation.setdefault("responses", {})
            if _is_fastapis_422(responses.get("422")):
                del responses["422"]
            for status, answer in _guard_answers(method, path, operation, ref).items():
                responses.setdefault(str(status), answer)
            operation["responses"] = dict(sorted(responses.items()))
    if f'"{REF}HTTPValidationError"' not in json.dumps(document.get("paths", {})):  # no route declares it itself
        schemas.pop("HTTPValidationError", None)
        schemas.pop("ValidationError", None)


def _is_fastapis_422(response: dict[str, Any] | None) -> bool:
    schema = ((response or {}).get("content") or {}).get("application/json", {}).get("schema", {})
    return bool(schema.get("$ref") == REF + "HTTPValidationError")
