"""Ingest into Prometheus through remote write 1.0, as another Prometheus (or an agent) would send it.

Bodies are a protobuf WriteRequest written by hand (a few varints and length-prefixed fields; no
generated stubs) in snappy's block format. Each request carries one sample per TimeSeries entry with its
full label set, as Prometheus 2.x's queue manager builds them, in the order a scrape writes them to the
WAL: every series of a node at one time, then the next second. 2,000 samples per request: 2.42's default
max_samples_per_send is 500 (its /api/v1/status/config shows it), later releases made 2,000 the default,
and operators raise it for throughput; it is also the size of our own ingest batches (80 GPU rows of
about 30 values). Timestamps are the seconds just before now, one second apart: the head of a fresh
Prometheus takes in-order samples no older than an hour before its newest.

Each node sends its requests in order on a keep-alive connection, at most one in flight (as a shard
does), through the ingest bench's load generator; the first request of every node is sent untimed, as
it creates the node's series.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Mapping

from gpuscope.bench.loadgen import push_all
from gpuscope.bench.prometheus_series import JOB_INFO, UP, exposed_metrics, gpu_labels, job_labels
from gpuscope.bench.telemetry import GPUS_PER_NODE, METRICS, make_telemetry

SAMPLES_PER_REQUEST = 2000
HEADERS = (
    "Content-Type: application/x-protobuf\r\nContent-Encoding: snappy\r\nX-Prometheus-Remote-Write-Version: 0.1.0\r\n"
)
_DOUBLE = struct.Struct("<d")


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(field: int, payload: bytes) -> bytes:
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def encode_labels(labels: Mapping[str, str]) -> bytes:
    """TimeSeries.labels (field 1): Label{name = 1, value = 2} messages sorted by name (__name__ first)."""
    return b"".join(
        length_delimited(1, length_delimited(1, name.encode()) + length_delimited(2, labels[name].encode()))
        for name in sorted(labels)
    )


def encode_sample(value: float, timestamp_ms: int) -> bytes:
    """Sample{double value = 1; int64 timestamp = 2}."""
    return b"\x09" + _DOUBLE.pack(value) + b"\x10" + varint(timestamp_ms)


def encode_write_request(series: list[tuple[bytes, float, int]]) -> bytes:
    """WriteRequest{repeated TimeSeries timeseries = 1}, one (labels, value, ms) sample per TimeSeries."""
    return b"".join(
        length_delimited(1, labels + length_delimited(2, encode_sample(value, ms))) for labels, value, ms in series
    )


def remote_write_bodies(
    nodes: int, batches: int, samples_per_request: int = SAMPLES_PER_REQUEST, end: float = 0.0
) -> list[list[tuple[bytes, int]]]:
    """Per node, `batches` (snappy body, samples) of the bench telemetry sampled every second, ending 1 s
    before `end` (0: now): each batch holds whole seconds of the node's series, about
    `samples_per_request` samples (the node's 8 GPUs x 8 series while jobs hold all its GPUs). The
    telemetry starts two hours earlier, so that jobs are under way (a fleet's first hour has few)."""
    import cramjam  # only the remote-write bench needs it (the test extra)

    seconds = max(1, samples_per_request // (GPUS_PER_NODE * (len(METRICS) + 2)))  # + up, job_info
    sent = batches * seconds
    telemetry = make_telemetry(nodes * GPUS_PER_NODE, 2 + sent / 3600, step_s=1, end=int(end or time.time()) - 1)
    first = telemetry.steps - sent
    metrics = exposed_metrics()
    # Each series' TimeSeries bytes up to its sample's value, built once: a sample adds 8 bytes of value
    # and its timestamp (the same varint length for every time from 1971 to 2109).
    sample_size = len(encode_sample(0.0, int(telemetry.end) * 1000))
    gpu_heads = [
        [_head({"__name__": name, **gpu_labels(gpu)}, sample_size) for name in [m.name for m in metrics] + [UP]]
        for gpu in telemetry.gpus
    ]
    job_heads = {
        (position, j): _head({"__name__": JOB_INFO, **job_labels(telemetry.gpus[position], job)}, sample_size)
        for j, job in enumerate(telemetry.jobs)
        for position in job.gpus
    }
    one = _DOUBLE.pack(1.0)
    bodies: list[list[tuple[bytes, int]]] = [[] for _ in range(nodes)]
    for lo in range(first, telemetry.steps, seconds):
        hi = lo + seconds
        values = telemetry.block(lo, hi)
        packed = [[[_DOUBLE.pack(v) for v in row] for row in (values[m.key] * m.scale).tolist()] for m in metrics]
        held = telemetry.job_index(lo, hi).tolist()
        stamps = [b"\x10" + varint(int(t) * 1000) for t in telemetry.stamps(lo, hi)]
        for node in range(nodes):
            parts: list[bytes] = []
            for step, stamp in enumerate(stamps):
                for gpu in range(node * GPUS_PER_NODE, (node + 1) * GPUS_PER_NODE):
                    heads = gpu_heads[gpu]
                    for i in range(len(metrics)):
                        parts += (heads[i], packed[i][step][gpu], stamp)
                    parts += (heads[-1], one, stamp)
                    if held[step][gpu] >= 0:
                        parts += (job_heads[(gpu, held[step][gpu])], one, stamp)
            body = bytes(cramjam.snappy.compress_raw(b"".join(parts)))
            bodies[node].append((body, len(parts) // 3))
    return bodies


def _head(labels: Mapping[str, str], sample_size: int) -> bytes:
    """A TimeSeries entry of WriteRequest up to the sample's value: what encode_write_request writes
    before _DOUBLE.pack(value)."""
    series = encode_labels(labels)
    return varint(1 << 3 | 2) + varint(len(series) + 2 + sample_size) + series + b"\x12" + varint(sample_size) + b"\x09"


def remote_write_rate(port: int, nodes: list[list[tuple[bytes, int]]], concurrency: int) -> tuple[int, float, int]:
    """Sends every node's first request untimed, then the rest timed; returns (samples acknowledged,
    seconds, 5xx answers: resent). A 4xx means a malformed request: RuntimeError."""
    first = [batches[:1] for batches in nodes]
    rest = [batches[1:] for batches in nodes]
    asyncio.run(push_all("127.0.0.1", port, "", first, concurrency, HEADERS, path="/api/v1/write"))
    result = asyncio.run(push_all("127.0.0.1", port, "", rest, concurrency, HEADERS, path="/api/v1/write"))
    return result.rows, result.seconds, result.failures
