"""Bearer-token checks for the ingest (and optionally read) API, in constant time."""

from __future__ import annotations

import hmac
import logging
import secrets
from pathlib import Path

from gpuscope.tokens import TokenError, read_token_file

log = logging.getLogger(__name__)


class TokenAuth:
    def __init__(self, tokens: list[str]) -> None:
        if not tokens or any(len(t) < 16 for t in tokens):
            raise TokenError("tokens must be at least 16 characters long")
        self._tokens = [t.encode() for t in tokens]

    def verify(self, authorization: str | None) -> bool:
        scheme, _, credential = (authorization or "").partition(" ")
        if scheme.lower() != "bearer":
            return False
        offered = credential.strip().encode()
        # Compare against every token, always, so timing says nothing about which (if any) matched.
        matched = False
        for token in self._tokens:
            matched |= hmac.compare_digest(offered, token)
        return matched


def token_or_generate(token_file: Path | None, data_dir: Path) -> str:
    """The configured token, or one generated once and kept in the data directory (mode 600)."""
    if token_file is not None:
        return read_token_file(token_file)
    generated = data_dir / "ingest-token"
    if generated.exists():
        return read_token_file(generated)
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    generated.touch(mode=0o600)
    generated.write_text(token + "\n", encoding="utf-8")
    log.info("generated an ingest token in %s (give it to exporters with --token-file)", generated)
    return token


def redact(secret: str) -> str:
    """Enough of a secret to tell two apart in a log, never enough to use it."""
    return secret[:4] + "…" if len(secret) > 8 else "…"
