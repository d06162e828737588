"""The one poster: sends a payload to a chat service or webhook and judges the answer, for the alerts'
outbox (delivery.py) and the digest (reports/digest/deliver_chat.py) alike.

- 2xx: sent.
- 429: retry, after as long as Retry-After says (the header, in seconds or as a date, or Discord's
  `retry_after` in the body), capped at an hour.
- 5xx, timeouts and network errors: retry (when, and until when, is the caller's policy).
- any other 4xx: failed (retrying a rejected payload cannot help), with the answer's start as the reason.

The webhook URL is a secret: it is registered with the log redaction before use, and what this module
returns shows it as its host only (httpx puts the URL in some error messages). Asynchronous; a
synchronous caller (the digest runs in a worker thread) posts through BlockingPoster.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import json
from dataclasses import dataclass
from typing import Any

import httpx

from gpuscope.alerts.notify import target_url
from gpuscope.alerts.redact import redact_url
from gpuscope.core.logredact import register_secret

TIMEOUT_S = 10.0
RETRY_AFTER_MAX_S = 3600.0


@dataclass(frozen=True)
class Outcome:
    result: str  # sent | retry | failed
    http_status: int | None
    detail: str
    wait_s: float | None = None  # for 429: what the service asked for


async def post(client: httpx.AsyncClient, kind: str, url: str, body: Any) -> Outcome:
    """POST `body` as JSON to the receiver of this kind at `url` (Alertmanager's API path added)."""
    register_secret(url)  # defence in depth: whatever logs this URL, its path and query show as ***
    target = target_url(kind, url)
    try:
        response = await client.post(target, json=body, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Outcome("retry", None, f"{type(exc).__name__}: {_no_url(_no_url(str(exc), target), url)}")
    return classify(response.status_code, response.headers, response.text)


class BlockingPoster:
    """`post` for synchronous code: one event loop and one client for all the posts made in the `with`.
    Call it from a thread with no running event loop (a worker thread, a CLI)."""

    def __init__(self) -> None:
        self._runner = asyncio.Runner()
        self._client = httpx.AsyncClient()

    def post(self, kind: str, url: str, body: Any) -> Outcome:
        return self._runner.run(post(self._client, kind, url, body))

    def __enter__(self) -> BlockingPoster:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._runner.run(self._client.aclose())
        finally:
            self._runner.close()


def classify(status: int, headers: httpx.Headers | dict[str, str], text: str) -> Outcome:
    detail = f"HTTP {status}" + (f": {text.strip()[:200]}" if text.strip() and status >= 300 else "")
    if 200 <= status < 300:
        return Outcome("sent", status, f"HTTP {status}")
    if status == 429:
        return Outcome("retry", status, detail, retry_after(headers, text))
    if status >= 500:
        return Outcome("retry", status, detail)
    return Outcome("failed", status, detail)


def retry_after(headers: httpx.Headers | dict[str, str], text: str) -> float | None:
    value = headers.get("retry-after") or headers.get("Retry-After")
    if value:
        try:
            return min(max(float(value), 0.0), RETRY_AFTER_MAX_S)
        except ValueError:
            when = email.utils.parsedate_to_datetime(value) if _is_date(value) else None
            if when is not None:
                if when.tzinfo is None:
                    when = when.replace(tzinfo=dt.UTC)
                return min(max((when - dt.datetime.now(dt.UTC)).total_seconds(), 0.0), RETRY_AFTER_MAX_S)
    try:
        doc = json.loads(text)  # Discord: {"retry_after": 1.5, ...} in seconds
        if isinstance(doc, dict) and isinstance(doc.get("retry_after"), int | float):
            return min(max(float(doc["retry_after"]), 0.0), RETRY_AFTER_MAX_S)
    except ValueError:
        pass
    return None


def _is_date(value: str) -> bool:
    try:
        return email.utils.parsedate_to_datetime(value) is not None
    except (TypeError, ValueError):
        return False


def _no_url(text: str, url: str) -> str:
    """httpx puts the URL in some error messages: keep the secret out."""
    return text.replace(url, redact_url(url))
