"""Webhook URLs carry their secret in the path or query: logs and messages show only the host."""

from __future__ import annotations

from urllib.parse import urlsplit


def redact_url(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    if not parts.scheme or not parts.hostname:
        return "<invalid URL>"
    port = f":{parts.port}" if parts.port else ""
    hidden = "/…" if (parts.path not in ("", "/") or parts.query) else ""
    return f"{parts.scheme}://{parts.hostname}{port}{hidden}"
