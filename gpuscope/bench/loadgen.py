"""A lean HTTP/1.1 load generator for the ingest path: many simulated nodes over keep-alive connections.

Each node has at most one batch in flight and sends its batches in order, as an exporter does. The
client is raw asyncio streams rather than an HTTP library, so that its own CPU (on the same two cores
as the collector and the database) stays small.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    batches: int = 0
    rows: int = 0
    failures: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0


async def push_all(
    host: str,
    port: int,
    token: str,
    nodes: list[list[tuple[bytes, int]]],
    concurrency: int = 64,
    content_headers: str = "Content-Type: application/json\r\nContent-Encoding: gzip\r\n",
    path: str = "/api/v1/samples",
) -> LoadResult:
    """Send every node's (body, rows) batches; returns what was acknowledged with 2xx. An empty `token`
    sends no Authorization header (Prometheus's remote-write receiver takes none)."""
    result = LoadResult()
    ready: deque[int] = deque(i for i, batches in enumerate(nodes) if batches)
    cursor = [0] * len(nodes)
    authorization = f"Authorization: Bearer {token}\r\n" if token else ""
    head = f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\n{authorization}{content_headers}".encode()

    async def worker() -> None:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while ready:
                node = ready.popleft()
                body, rows = nodes[node][cursor[node]]
                writer.write(head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
                status = await _response_status(reader)
                result.statuses[status] = result.statuses.get(status, 0) + 1
                if 200 <= status < 300:
                    result.batches += 1
                    result.rows += rows
                    cursor[node] += 1
                elif 400 <= status < 500:
                    raise RuntimeError(f"{path} refused a batch with {status}: a bug in the benchmark")
                else:
                    result.failures += 1  # resent later, like the exporter's retry
                if cursor[node] < len(nodes[node]):
                    ready.append(node)
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, len(nodes)))))
    result.seconds = time.perf_counter() - started
    return result


async def _response_status(reader: asyncio.StreamReader) -> int:
    header = await reader.readuntil(b"\r\n\r\n")
    status = int(header.split(b" ", 2)[1])
    length = 0
    for line in header.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    if length:
        await reader.readexactly(length)
    return status
