"""Silences created and expired through the collector's API (the dashboard only reads the database), in
the name of whoever is at the keyboard: the user logged in with basic auth (the dashboard's own users,
or a proxy's in front of it), else the name typed in the form. Never a made-up "dashboard"."""

from __future__ import annotations

from dataclasses import dataclass

import flask
import httpx

TIMEOUT_S = 10


def signed_in_user() -> str | None:
    """The basic-auth user of the request being served, if any (None outside a request)."""
    if not flask.has_request_context():
        return None
    auth = flask.request.authorization
    if auth is None or auth.type != "basic" or not auth.username:
        return None
    return auth.username


def author(typed: str | None) -> str | None:
    """Who is creating a silence: the logged-in user, else the name typed (None: neither)."""
    return signed_in_user() or (typed or "").strip() or None


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str


def create(
    collector_url: str, token: str, matchers: list[str], duration_s: int, comment: str, created_by: str
) -> Outcome:
    body = {"matchers": matchers, "duration_s": duration_s, "comment": comment, "created_by": created_by}
    return _send("POST", _base(collector_url), token, body, "Created")


def expire(collector_url: str, token: str, silence_id: int) -> Outcome:
    return _send("DELETE", f"{_base(collector_url)}/{silence_id}", token, None, "Expired")


def _base(collector_url: str) -> str:
    return collector_url.rstrip("/") + "/api/v1/silences"


def _send(method: str, url: str, token: str, body: dict[str, object] | None, verb: str) -> Outcome:
    headers = {"Authorization": f"Bearer {token.strip()}"}
    try:
        response = httpx.request(method, url, json=body, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as exc:
        return Outcome(False, f"Collector unreachable: {type(exc).__name__}")
    if response.status_code >= 300:
        detail = response.json().get("detail", response.text) if _is_json(response) else response.text
        return Outcome(False, f"Refused (HTTP {response.status_code}): {detail}")
    silence = response.json()
    return Outcome(True, f"{verb} silence {silence['id']}.")


def _is_json(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").startswith("application/json")
