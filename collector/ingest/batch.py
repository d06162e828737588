"""The limits a batch must keep and the error that rejects one (the decoded batch itself: store/batch.py)."""

from __future__ import annotations

import zlib
from typing import Any

FORMAT = "gpuscope-samples"
MAX_FUTURE_SECONDS = 300.0
MIN_TIMESTAMP = 946_684_800.0  # 2000-01-01: anything older is a broken clock, not history
MAX_NAME = 128
# a job id, pod or workload name: a pod named as a DNS subdomain (253) in its namespace (63), and a slash
MAX_JOB_NAME = 320
MAX_DEVICES = 4096
MAX_ROWS = 1_000_000
MAX_EVENTS = 10_000
# JSON text (a version 1 body, a version 2 header) after decompression. Parsing JSON costs memory and
# time out of proportion to its size (up to about 25 bytes of objects per byte of `[[],[],...]`), and
# the parser holds the interpreter while it runs: this bounds both (about 0.2 GB and 0.4 s at worst).
MAX_JSON_BYTES = 8 * 2**20
# Runs of rows of one GPU with the same job (in time order): a job change starts the next run.
MAX_JOB_RUNS = 64
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


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """The body after its Content-Encoding (as body_rules.py checked it: "identity" or "gzip"), at
    most `limit` bytes (413 beyond)."""
    if encoding == "gzip":
        return gunzip(body, limit)
    if encoding != "identity":
        raise ValueError(f"an unchecked Content-Encoding {encoding!r} (body_rules.check_encoding)")
    if len(body) > limit:
        raise IngestError(413, ("body",), f"body exceeds {limit} bytes")
    return body


PIECE = 2**20  # output per zlib call: the limit is checked as the output grows, never after
GZIP_MAGIC = b"\x1f\x8b"


def gunzip(body: bytes, limit: int) -> bytes:
    """gzip data (RFC 1952: one member, or several one after another) decompressed piece by piece,
    stopping with 413 as soon as the output passes `limit`; 400 for anything but complete members: a
    truncated one (no CRC-32 and size trailer), a wrong CRC-32 or size, or bytes after the last one."""
    out: list[bytes] = []
    size = 0
    data = body
    while True:
        if not data.startswith(GZIP_MAGIC):
            where = "bytes after the gzip data" if out else "not gzip data"
            raise IngestError(400, ("body",), f"invalid gzip data: {where}")
        decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        while not decompressor.eof:
            room = min(PIECE, limit - size + 1)
            try:
                piece = decompressor.decompress(data, room)
            except zlib.error as exc:
                raise IngestError(400, ("body",), f"invalid gzip data: {exc}") from None
            size += len(piece)
            if size > limit:
                raise IngestError(413, ("body",), f"decompressed body exceeds {limit} bytes")
            out.append(piece)
            data = decompressor.unconsumed_tail
            if not data and len(piece) < room and not decompressor.eof:
                raise IngestError(400, ("body",), "invalid gzip data: truncated (it ends before its trailer)")
        data = decompressor.unused_data
        if not data:
            return b"".join(out)
