"""Reading bearer tokens from files, for the exporter (sender) and the collector (checker) alike."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

log = logging.getLogger(__name__)


class TokenError(RuntimeError):
    pass


def read_token_file(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TokenError(f"cannot read token file {path}: {exc.strerror}") from None
    token = text.strip()
    if not token or "\n" in token:
        raise TokenError(f"token file {path} must hold exactly one non-empty line")
    if path.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
        log.warning("token file %s is readable by other users; chmod 600 it", path)
    return token
