"""The command line's way to a collector's API (`gpuscope alerts silence`, `gpuscope health`): the URL
checked, the bearer token from a file, and a collector that cannot be reached said in one line."""

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


@contextlib.contextmanager
def collector_client(url: str, token_file: Path | None, timeout_s: float) -> Iterator[Any]:
    """An httpx.Client with the token's header; a request that cannot reach `url` raises RuntimeError
    naming the collector tried and how to name another (the default URL is only a guess)."""
    import httpx  # the server stack's: not imported where only the exporter is installed

    if not url.startswith(("http://", "https://")):
        raise ValueError(f"--collector must be a URL starting with http:// or https://, got {url!r}")
    headers = {"Authorization": f"Bearer {read_token_file(token_file)}"} if token_file else {}
    with httpx.Client(headers=headers, timeout=timeout_s) as client:
        try:
            yield client
        except httpx.TransportError as exc:
            raise RuntimeError(
                f"cannot reach a collector at {url} ({_reason(exc)}): start one, or pass --collector URL"
            ) from None


def refused(response: Any) -> bool:
    """True (and the status and body on stderr) when the collector did not do what was asked."""
    if response.status_code < 300:
        return False
    print(f"HTTP {response.status_code}: {response.text.strip()[:500]}", file=sys.stderr)
    return True


def _reason(exc: Exception) -> str:
    """httpx's reason in words: "Connection refused", not "[Errno 111] Connection refused"."""
    text = str(exc).strip() or type(exc).__name__
    return re.sub(r"^\[Errno -?\d+\]\s*", "", text)
