"""The command line's way to a collector's API (`gpuscope alerts silence`, `gpuscope health`, `gpuscope
jobstats`): the URL checked, the bearer token from a file, a collector that cannot be reached said in one
line, and a refusal said as the collector's reason in words, a refused token naming the file it came from."""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuscope.core.tokens import read_token_file

# Where the command line finds a collector when not told: the port `gpuscope collector` and the demo use.
DEFAULT_COLLECTOR = "http://127.0.0.1:9410"
# Each response carries the token file its request used, so that a refusal can name it (refused()).
_TOKEN_FILE = "gpuscope.token_file"  # noqa: S105 (a key naming the file, not a secret)


@contextlib.contextmanager
def collector_client(url: str, token_file: Path | None, timeout_s: float) -> Iterator[Any]:
    """An httpx.Client with the token's header; a request that cannot reach `url` raises RuntimeError
    naming the collector tried and how to name another (the default URL is only a guess)."""
    import httpx  # the server stack's: not imported where only the exporter is installed

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--collector must be a URL starting with http:// or https://, got {url!r}")
    headers = {"Authorization": f"Bearer {read_token_file(token_file)}"} if token_file else {}

    def remember_token_file(response: httpx.Response) -> None:
        response.extensions[_TOKEN_FILE] = token_file

    with httpx.Client(headers=headers, timeout=timeout_s, event_hooks={"response": [remember_token_file]}) as client:
        try:
            yield client
        except httpx.TransportError as exc:
            raise RuntimeError(
                f"cannot reach a collector at {url} ({_reason(exc)}): start one, or pass --collector URL"
            ) from None


def refused(response: Any) -> bool:
    """True (and why, in one line on stderr) when the collector did not do what was asked."""
    if response.status_code < 300:
        return False
    print(f"gpuscope: error: {refusal_in_words(response)}", file=sys.stderr)
    return True


def refusal_in_words(response: Any) -> str:
    """The collector's reason (its `detail`, not the JSON around it) with the status; for a refused token,
    which file it came from, or that none was given and how to give one."""
    status = response.status_code
    reason = f"{_detail(response)} (HTTP {status})"
    if status not in (401, 403):
        return reason
    token_file = response.extensions.get(_TOKEN_FILE)
    if token_file is None:
        return f"{reason}: no token was given; pass --token-file FILE with the collector's token"
    if status == 401:
        return f"{reason}: the collector does not accept the token in {token_file}"
    return f"{reason}: the token in {token_file} is not the one this needs"


def _detail(response: Any) -> str:
    """`detail` of the JSON answer every refusal carries (collector/api/errors.py), else the body's start."""
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = None
    text = detail if isinstance(detail, str) and detail else response.text.strip()[:500]
    return " ".join(text.split()) or response.reason_phrase or "no reason given"


def _reason(exc: Exception) -> str:
    """httpx's reason in words: "Connection refused", not "[Errno 111] Connection refused"."""
    text = str(exc).strip() or type(exc).__name__
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text)
