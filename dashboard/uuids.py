"""GPU and MIG UUIDs as people read them: the first 8 hex digits tell a site's GPUs apart; the whole UUID
stays in the hover text."""

from __future__ import annotations

from dash import html


def short_uuid(uuid: str) -> str:
    """GPU-1a2b3c4d-5e6f-... as GPU-1a2b3c4d…; anything else long cut at 12 characters."""
    prefix, sep, rest = uuid.partition("-")
    if sep and prefix in ("GPU", "MIG") and len(rest) > 8:
        return f"{prefix}-{rest[:8]}…"
    return uuid if len(uuid) <= 16 else uuid[:12] + "…"


def uuid_span(uuid: str) -> html.Span:
    return html.Span(short_uuid(uuid), title=uuid, className="uuid", style={"fontFamily": "monospace"})
