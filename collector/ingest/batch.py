"""The limits a batch must keep and the error that rejects one (the decoded batch itself: store/batch.py)."""

from __future__ import annotations

import zlib
from typing import Any

FORMAT = "gpuscope-samples"
MAX_FUTURE_SECONDS = 300.0
MIN_TIMESTAMP = 946_684_800.0  # 2000-01-01: anything older is a broken clock, not history
MAX_NAME = 128
MAX_DEVICES = 4096
MAX_ROWS = 1_000_000
MAX_EVENTS = 10_000
TIME_RULE = f"a timestamp within the retention period and at most {MAX_FUTURE_SECONDS:.0f} s in the future"

Loc = tuple[str | int, ...]


class IngestError(Exception):
    def __init__(self, status: int, loc: Loc, msg: str) -> None:
        super().__init__(f"{'.'.join(map(str, loc))}: {msg}" if loc else msg)
        self.status = status
        self.loc = loc
        self.msg = msg

    def detail(self) -> list[dict[str, Any]]:
        return [{"loc": list(self.loc), "msg": self.msg}]


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "identity":
        return body
    if encoding != "gzip":
        raise IngestError(415, ("header", "Content-Encoding"), f"unsupported encoding {encoding!r}; use gzip")
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = decompressor.decompress(body, limit + 1)
    except zlib.error as exc:
        raise IngestError(400, ("body",), f"invalid gzip data: {exc}") from None
    if len(out) > limit or decompressor.unconsumed_tail:
        raise IngestError(413, ("body",), f"decompressed body exceeds {limit} bytes")
    return out
