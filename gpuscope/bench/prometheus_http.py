"""PromQL over Prometheus's HTTP API, timed as a dashboard sees it: request, whole answer, JSON decoded.

One keep-alive connection per timed series of runs (as a Grafana data source keeps one), the first run
untimed (it warms the page cache and Prometheus's postings), then `runs` timed ones.
"""

from __future__ import annotations

import http.client
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import orjson

RUNS = 20
TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Timed:
    times_ms: list[float]
    result: list[dict[str, Any]]  # data.result of the last run: [{"metric": {...}, "values" or "value": ...}]


def query_range(port: int, expr: str, start: float, end: float, step: float, runs: int = RUNS) -> Timed:
    params = {"query": expr, "start": _seconds(start), "end": _seconds(end), "step": _seconds(step)}
    return _timed(port, "/api/v1/query_range", params, runs)


def query(port: int, expr: str, at: float, runs: int = RUNS) -> Timed:
    return _timed(port, "/api/v1/query", {"query": expr, "time": _seconds(at)}, runs)


def fetch(port: int, path: str, params: dict[str, str] | None = None) -> Any:
    """One untimed call; its `data`."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        return _call(connection, path, params or {})
    finally:
        connection.close()


def _timed(port: int, path: str, params: dict[str, str], runs: int) -> Timed:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=TIMEOUT_S)
    try:
        data = _call(connection, path, params)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            data = _call(connection, path, params)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        connection.close()
    return Timed(times, data["result"])


def _call(connection: http.client.HTTPConnection, path: str, params: dict[str, str]) -> Any:
    connection.request("GET", f"{path}?{urllib.parse.urlencode(params)}" if params else path)
    response = connection.getresponse()
    body = orjson.loads(response.read())
    if response.status != 200 or body.get("status") != "success":
        raise RuntimeError(f"{path} {params.get('query', '')!r}: {response.status} {body.get('error', body)}")
    return body["data"]


def _seconds(value: float) -> str:
    return f"{value:.3f}"  # Prometheus keeps milliseconds
