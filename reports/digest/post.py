"""Posts a chat message, judged as the alert delivery judges an answer (alerts/delivery.py classify: 2xx
sent, 429 and 5xx retry, another 4xx failed). Synchronous: the digest runs in a worker thread, beside the
usage queries. The webhook URL is a secret: registered with the log redaction, and shown as its host only."""

from __future__ import annotations

from typing import Any

import httpx

from gpuscope.alerts.delivery import Outcome, classify
from gpuscope.alerts.redact import redact_url
from gpuscope.core.logredact import register_secret

TIMEOUT_S = 10.0


def post_json(client: httpx.Client, url: str, body: Any) -> Outcome:
    register_secret(url)  # defence in depth: whatever logs this URL shows neither its path nor its query
    try:
        response = client.post(url, json=body, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Outcome("retry", None, f"{type(exc).__name__}: {str(exc).replace(url, redact_url(url))}")
    return classify(response.status_code, response.headers, response.text)
