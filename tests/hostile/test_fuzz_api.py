"""Every route of the collector's own /openapi.json, fuzzed by schemathesis against a `gpuscope collector`
process over PostgreSQL: requests that fit the schema and requests that break it (positive and negative
generation), sent with the token each route wants, with a valid token of the wrong kind, and with none.

Whatever the request: no 5xx, an answer within 5 s, and the answer as the description declares it (its
status code, content type, headers and body, refusals included: schemathesis's conformance checks, none
switched off); without a token 401 on every route but /healthz, and with a token of the wrong kind 401
or 403.
Half the examples are steered towards names the collector has (steer()), so that they reach the
queries. The examples are deterministic and few enough that the module runs in well under a minute on
two cores; the last test checks the collector's memory, database and log after all of it."""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from gpuscope.collector.store.columns import GPU_METRIC_KEYS, PORT_METRICS
from tests.hostile.batches import v1_batch, v1_body
from tests.hostile.conftest import HOSTILE, RESPONSE_LIMIT_S, HostileCollector, check_after_fuzz

# Every operation the collector describes, listed so that each is a test of its own (and one can be
# marked on its own); test_the_openapi_lists_exactly_these_routes fails when a route is added or removed.
ROUTES = [
    ("POST", "/api/v1/samples"),
    ("GET", "/api/v1/heatmap"),
    ("GET", "/api/v1/series"),
    ("GET", "/api/v1/rack-power"),
    ("GET", "/api/v1/fleet"),
    ("GET", "/api/v1/top"),
    ("GET", "/api/v1/nics/series"),
    ("GET", "/api/v1/jobs"),
    ("GET", "/api/v1/jobs/{job_id}"),
    ("GET", "/api/v1/stragglers"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/alerts"),
    ("GET", "/api/v1/alerts/rules"),
    ("GET", "/api/v1/alerts/notifications"),
    ("GET", "/api/v1/silences"),
    ("POST", "/api/v1/silences"),
    ("DELETE", "/api/v1/silences/{silence_id}"),
    ("GET", "/api/v1/health/nodes"),
    ("GET", "/api/v1/health/transitions"),
    ("GET", "/api/v1/health/actions"),
    ("GET", "/api/v1/health/episodes"),
    ("GET", "/api/v1/health/episodes/{episode_id}"),
    ("GET", "/api/v1/health/repairs"),
    ("GET", "/api/v1/health/replay"),
    ("PUT", "/api/v1/health/nodes/{cluster}/{node}/hold"),
    ("DELETE", "/api/v1/health/nodes/{cluster}/{node}/hold"),
    ("GET", "/api/v1/reports/usage"),
    ("GET", "/api/v1/reports/stragglers"),
    ("GET", "/api/v1/reports/jobs/{job_id}"),
    ("GET", "/api/v1/reports/grid"),
    ("PUT", "/api/v1/reports/grid"),
    ("GET", "/api/v1/reports/opt-out"),
    ("PUT", "/api/v1/reports/opt-out/{user}"),
    ("DELETE", "/api/v1/reports/opt-out/{user}"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
]
OPEN = {("GET", "/healthz")}
IDS = [f"{method} {path}" for method, path in ROUTES]

# Examples per route, pass and generation (positive, then negative where the route has something to
# break): about 1,100 requests in all, some 15 s on two cores, most of it schemathesis generating them.
RIGHT_EXAMPLES = 30
WRONG_EXAMPLES = 5


@dataclass(frozen=True)
class Api:
    collector: HostileCollector
    schema: Any  # schemathesis's OpenApiSchema
    known: dict[str, st.SearchStrategy[Any]]  # parameter -> values the seeded data has (see steer())

    def right_token(self, method: str, path: str) -> str:
        if path == "/api/v1/samples":
            return self.collector.ingest
        return self.collector.read if method == "GET" else self.collector.admin

    def wrong_token(self, method: str, path: str) -> str:
        """A token of this collector that is not for this route."""
        if path == "/api/v1/samples":
            return self.collector.read
        return self.collector.ingest if method == "GET" else self.collector.read


@pytest.fixture(scope="module")
def api(hostile_collector: HostileCollector) -> Api:
    """The collector with something to read (a node with GPUs, a port, jobs, events, a silence), its
    OpenAPI description as fetched with the read token, and its memory baseline taken after that."""
    collector = hostile_collector
    exporter = str(uuid.uuid4())
    batches = [v1_batch(exporter_id=exporter, seq=seq, node=node, gpus=2, rows=3, jobs=2, events=2)
               for seq, node in enumerate(NODES)]  # fmt: skip
    for batch in batches:
        stored = httpx.post(f"{collector.url}/api/v1/samples", content=v1_body(batch),
                            headers=_bearer(collector.ingest), timeout=RESPONSE_LIMIT_S)  # fmt: skip
        assert stored.status_code == 200, stored.text
    silence = {"matchers": ["node=node-0"], "duration_s": 600, "comment": "seeded"}
    created = httpx.post(f"{collector.url}/api/v1/silences", json=silence, headers=_bearer(collector.admin))
    assert created.status_code == 201, created.text
    spec = httpx.get(f"{collector.url}/openapi.json", headers=_bearer(collector.read), timeout=RESPONSE_LIMIT_S)
    assert spec.status_code == 200, spec.text
    schema = schemathesis.openapi.from_dict(spec.json())
    schema.config.update(base_url=collector.url)
    jobs = sorted({job["id"] for batch in batches for job in batch["jobs"]})
    known = {
        "cluster": st.just("fuzz"),
        "node": st.sampled_from(NODES),
        "uuid": st.sampled_from(sorted(gpu["uuid"] for batch in batches for gpu in batch["gpus"])),
        "job": st.sampled_from(jobs),
        "job_id": st.sampled_from(jobs),
        "user": st.just("alice"),
        "kind": st.just("xid"),
        "silence_id": st.just(created.json()["id"]),
    }
    return Api(collector.with_baseline(), schema, known)


NODES = ("node-0", "node-1")
GPU_METRICS = st.sampled_from(sorted(GPU_METRIC_KEYS))
RECENT = st.sampled_from([{}, {"minutes": 5}, {"minutes": 1440}, {"bucket_seconds": 1}, {"bucket_seconds": 3600}])


def steer(api: Api, case: Any, data: st.DataObject) -> None:
    """Most of what schemathesis makes up is refused at the first check (an unknown metric, a node that is
    not there, an end before its start): half the time, put names the collector has in place of some
    of the made-up ones, so that requests get past the checks and into the queries."""
    if not data.draw(st.booleans(), label="steer"):
        return
    route = (case.method.upper(), case.operation.path)
    query = case.query if isinstance(case.query, dict) else None
    if query is not None:
        for name in list(query):
            if name in api.known and data.draw(st.booleans(), label=f"known {name}"):
                query[name] = data.draw(api.known[name], label=name)
        if "metric" in query and data.draw(st.booleans(), label="known metric"):
            if route == ("GET", "/api/v1/nics/series"):
                query["metric"] = data.draw(st.sampled_from(sorted(PORT_METRICS)), label="metric")
            elif route == ("GET", "/api/v1/series"):
                query["metric"] = data.draw(st.lists(GPU_METRICS, min_size=1, max_size=3), label="metrics")
            else:
                query["metric"] = data.draw(GPU_METRICS, label="metric")
        if data.draw(st.booleans(), label="recent"):
            for name in ("start", "end", "minutes", "range", "bucket_seconds"):
                query.pop(name, None)
            query.update(data.draw(RECENT, label="range"))
    if isinstance(case.path_parameters, dict):
        for name in list(case.path_parameters):
            if name in api.known and data.draw(st.booleans(), label=f"known {name}"):
                case.path_parameters[name] = data.draw(api.known[name], label=name)
    if route == ("POST", "/api/v1/silences") and data.draw(st.booleans(), label="valid silence"):
        node = data.draw(st.sampled_from(NODES), label="silenced node")
        case.body = {"matchers": [f"node={node}", {"name": "alertname", "op": "=~", "value": "Gpu.*"}],
                     "duration_s": 60}  # fmt: skip


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


# ---------------------------------------------------------------------------------------------------
# Checks, in schemathesis's signature (context, response, case); a failed one raises AssertionError.

# What uvicorn answers, before any of the collector's code runs, to a request that is not valid HTTP (a
# control character in a header value, which negative generation produces): no route saw it.
NOT_HTTP = (400, "Invalid HTTP request received.")


def _not_http(response: Any) -> bool:
    return (response.status_code, response.text) == NOT_HTTP


def within_the_limit(ctx: Any, response: Any, case: Any) -> None:
    took = response.elapsed  # seconds
    assert took <= RESPONSE_LIMIT_S, f"answered after {took:.1f} s (limit {RESPONSE_LIMIT_S:g} s)"


def _but_not_http(check: Callable[..., Any]) -> Callable[..., Any]:
    """`check` on every answer but uvicorn's own (NOT_HTTP), under the same name in schemathesis's report."""

    @functools.wraps(check)
    def checked(ctx: Any, response: Any, case: Any) -> Any:
        return None if _not_http(response) else check(ctx, response, case)

    return checked


# Every answer as the description declares it: its status code, content type, headers and body.
AS_DECLARED = tuple(
    _but_not_http(check)
    for check in (status_code_conformance, content_type_conformance, response_headers_conformance,
                  response_schema_conformance)
)  # fmt: skip


def refused_without_a_token(ctx: Any, response: Any, case: Any) -> None:
    if _not_http(response):
        return
    assert response.status_code == 401, f"no token: expected 401, got {response.status_code}"
    assert response.headers.get("www-authenticate") == ["Bearer"], response.headers


def refused_with_another_token(ctx: Any, response: Any, case: Any) -> None:
    if _not_http(response):
        return
    assert response.status_code in (401, 403), f"a token of another kind: expected 401/403, got {response.status_code}"


def open_to_anyone(ctx: Any, response: Any, case: Any) -> None:
    assert response.status_code == 200, f"/healthz answers everyone: got {response.status_code}"


def fuzz(
    api: Api, method: str, path: str, token: str | None, checks: tuple[Callable[..., Any], ...], examples: int
) -> None:
    """`examples` requests that fit the operation's schema and `examples` that break it (where it can be
    broken), each sent with `token` (None: no Authorization header) and put through `checks`."""
    operation = api.schema[path][method]
    headers = _bearer(token) if token is not None else {}
    raw = operation.definition.raw
    # Nothing to break in GET /fleet (no parameters), nor in a path parameter that takes any string.
    breakable = "requestBody" in raw or any(
        not (p["in"] == "path" and p.get("schema", {}).get("type") == "string") for p in raw.get("parameters", [])
    )
    generations = [GenerationMode.POSITIVE] + ([GenerationMode.NEGATIVE] if breakable else [])
    for generation in generations:
        sent = _send(api, operation.as_strategy(generation_mode=generation), headers, checks, examples)
        assert sent > 0, f"{method} {path}: schemathesis generated no {generation.value} request"


def _send(
    api: Api,
    strategy: st.SearchStrategy[Any],
    headers: dict[str, str],
    checks: tuple[Callable[..., Any], ...],
    examples: int,
) -> int:
    """Up to `examples` of `strategy`'s cases, steered, sent and checked; how many were sent."""
    sent = 0

    @settings(HOSTILE, max_examples=examples)
    @given(case=strategy, data=st.data())
    def run(case: Any, data: st.DataObject) -> None:
        nonlocal sent
        steer(api, case, data)
        response = case.call(headers=headers, timeout=RESPONSE_LIMIT_S)
        sent += 1
        case.validate_response(response, checks=[not_a_server_error, within_the_limit, *checks], headers=headers)

    run()
    return sent


def test_the_openapi_lists_exactly_these_routes(api: Api) -> None:
    described = {(method.upper(), path) for path, ops in api.schema.raw_schema["paths"].items() for method in ops}
    assert described == set(ROUTES), f"added: {described - set(ROUTES)}, gone: {set(ROUTES) - described}"


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_with_the_right_token(api: Api, method: str, path: str) -> None:
    fuzz(api, method, path, api.right_token(method, path), AS_DECLARED, RIGHT_EXAMPLES)


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_without_a_token(api: Api, method: str, path: str) -> None:
    expected = open_to_anyone if (method, path) in OPEN else refused_without_a_token
    fuzz(api, method, path, None, (expected, *AS_DECLARED), WRONG_EXAMPLES)


@pytest.mark.parametrize(("method", "path"), ROUTES, ids=IDS)
def test_with_a_token_of_another_kind(api: Api, method: str, path: str) -> None:
    expected = open_to_anyone if (method, path) in OPEN else refused_with_another_token
    fuzz(api, method, path, api.wrong_token(method, path), (expected, *AS_DECLARED), WRONG_EXAMPLES)


def test_a_request_that_does_not_validate_is_refused_in_a_sentence(api: Api) -> None:
    """Every refusal answers `detail` as a sentence (as the description declares); one that did not
    validate names each field in `errors` too."""
    refused = httpx.get(f"{api.collector.url}/api/v1/jobs", params={"limit": "0"},
                        headers=_bearer(api.collector.read), timeout=RESPONSE_LIMIT_S)  # fmt: skip
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["detail"] == "query.limit: Input should be greater than or equal to 1", body
    assert [(e["loc"], e["type"]) for e in body["errors"]] == [(["query", "limit"], "greater_than_equal")], body


def test_after_all_of_it_the_collector_is_well(api: Api) -> None:
    """Last in the module: memory back near its baseline, the database barely grown, no token logged."""
    check_after_fuzz(api.collector)
