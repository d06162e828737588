"""Hostile input on POST /api/v1/samples (review issue 16): exact int64 bounds, cheap exhaustion by any
token holder, node tokens bound to their cluster and node, strict parsing, and a format document
complete enough to write a sender from (its example is posted verbatim)."""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
import pytest

from gpuscope.collector.ingest import header as header_rules
from gpuscope.collector.store.columns import GPU_COLUMNS
from gpuscope.core.listen import free_loopback_port
from tests.collector.helpers import NOTHING, post, stored
from tests.collector.test_ingest_binary import binary_batch, split, with_header
from tests.commands import start_collector, token_file
from tests.conftest import count_rows
from tests.processes import RunningCollector, running_collector

INT64_MAX = 2**63 - 1
BINARY = "application/x-gpuscope-samples"
DOC = Path(__file__).resolve().parents[2] / "docs" / "ingest-format.md"


# ---------------------------------------------------------------------------------------------------
# Batches built by hand, as a third-party sender would (the exporter's encoder is not the contract).


def v1_batch(
    *,
    rows: int = 3,
    gpus: int = 2,
    cluster: str = "test",
    rack: str = "rack-00",
    node: str = "node-000",
    seq: int = 1,
    gpu_values: dict[str, list[Any]] | None = None,
    port_values: dict[str, list[Any]] | None = None,
    start: float | None = None,
) -> dict[str, Any]:
    """`rows` snapshots of `gpus` GPUs and one InfiniBand port, one second apart, ending a minute ago."""
    start = start if start is not None else time.time() - 60 - rows
    ts = [start + i for i in range(rows) for _ in range(gpus)]
    return {
        "format": "gpuscope-samples",
        "version": 1,
        "exporter_id": str(uuid.uuid4()),
        "seq": seq,
        "source": {"cluster": cluster, "rack": rack, "node": node, "backend": "sim"},
        "gpus": [
            {"index": g, "uuid": f"GPU-{node}-{g}", "model": "H100", "pci_bus_id": f"00000000:{g:02x}:00.0"}
            for g in range(gpus)
        ],
        "ports": [{"device": "mlx5_0", "port": 1}],
        "gpu_samples": {
            "ts": ts,
            "gpu": [g for _ in range(rows) for g in range(gpus)],
            "up": [True] * len(ts),
            "values": gpu_values if gpu_values is not None else {"util_pct": [50] * len(ts)},
        },
        "port_samples": {
            "ts": [start + i for i in range(rows)],
            "port": [0] * rows,
            "values": port_values if port_values is not None else {"xmit_bytes": [1000 * i for i in range(rows)]},
        },
    }


def v2_body(doc: dict[str, Any], job: list[int] | None = None) -> bytes:
    """Format v2 of a v1-shaped dict, written from the layout in docs/ingest-format.md."""
    header = {k: v for k, v in doc.items() if k not in ("gpu_samples", "port_samples")}
    header["version"] = 2
    blocks = []
    for key, device_key in (("gpu_samples", "gpu"), ("port_samples", "port")):
        samples = doc[key]
        header[key] = {"rows": len(samples["ts"]), "values": list(samples["values"])}
        arrays = [np.array(samples["ts"], "<f8")]
        arrays += [np.array([np.nan if v is None else v for v in vs], "<f8") for vs in samples["values"].values()]
        if key == "gpu_samples" and job is not None:
            arrays.append(np.array(job, "<i4"))
        arrays.append(np.array(samples[device_key], "<u2"))
        if key == "gpu_samples":
            arrays.append(np.array(samples["up"], "u1"))
        blocks.append(arrays)
    head = json.dumps(header).encode()
    parts = [b"GPSB", len(head).to_bytes(4, "little"), head]
    for arrays in blocks:
        parts.append(b"\0" * (-sum(map(len, parts)) % 8))
        parts.extend(a.tobytes() for a in arrays)
    parts.append(b"\0" * (-sum(map(len, parts)) % 8))
    return b"".join(parts)


def one_value(dsn: str, query: str) -> Any:
    with psycopg.connect(dsn) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


# ---------------------------------------------------------------------------------------------------
# Finding 3: int64 bounds are exact; reads do not overflow.


def test_counters_at_int64_max_are_stored_exactly_from_json_integers(collector: RunningCollector) -> None:
    batch = v1_batch(
        rows=2,
        gpu_values={"nvlink_tx_bytes": [INT64_MAX, 2**53 + 1, INT64_MAX - 1, 0]},
        port_values={"xmit_bytes": [INT64_MAX, 12_345_678_901_234_567]},
    )
    response = post(collector, batch)
    assert response.status_code == 200, response.text
    with psycopg.connect(collector.dsn) as conn:
        ports = [v for (v,) in conn.execute("SELECT xmit_bytes FROM ib_port_sample ORDER BY ts")]
        gpus = [v for (v,) in conn.execute("SELECT nvlink_tx_bytes FROM gpu_sample ORDER BY ts, gpu_id")]
    assert ports == [INT64_MAX, 12_345_678_901_234_567]
    assert gpus == [INT64_MAX, 2**53 + 1, INT64_MAX - 1, 0]


@pytest.mark.parametrize(
    "raw_value",
    [
        b"9223372036854775808",  # 2^63 as a JSON integer
        b"18446744073709551615",  # 2^64-1 (orjson reads it as an integer)
        b"18446744073709551616",  # 2^64 (read as a double)
        b"9.223372036854775807e18",  # a double: exactly 2^63
        b"9223372036854775807.0",  # also the double 2^63
    ],
)
def test_counters_beyond_int64_are_refused(collector: RunningCollector, raw_value: bytes) -> None:
    body = json.dumps(v1_batch(rows=2, port_values={"xmit_bytes": [1, 777]})).encode()
    body = body.replace(b"[1, 777]", b"[1, " + raw_value + b"]")
    response = post(collector, body)
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == ["port_samples", "values", "xmit_bytes", 1]
    assert "9223372036854775807" in problem["msg"], "the bound is given exactly"
    assert stored(collector) == NOTHING


def test_v2_doubles_at_2_63_are_refused_and_the_largest_below_is_exact(collector: RunningCollector) -> None:
    largest_below = float(np.nextafter(2.0**63, 0))  # 2^63 - 1024
    refused = v1_batch(rows=2, port_values={"xmit_bytes": [0.0, 2.0**63]})
    response = post(collector, v2_body(refused), **{"Content-Type": BINARY})
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["port_samples", "values", "xmit_bytes", 1]
    assert stored(collector) == NOTHING
    fine = v1_batch(rows=2, port_values={"xmit_bytes": [0.0, largest_below]})
    assert post(collector, v2_body(fine), **{"Content-Type": BINARY}).status_code == 200
    assert one_value(collector.dsn, "SELECT max(xmit_bytes) FROM ib_port_sample") == 2**63 - 1024


def test_a_group_of_batches_keeps_integers_exact_where_one_lacks_the_column(dsn: str) -> None:
    """Batches stored in one COPY where only one reports a counter: the others' rows are NULL there,
    and the one's 2^63-1 stays exact (a NaN fill would make the column doubles)."""
    import asyncio

    from psycopg_pool import AsyncConnectionPool

    from gpuscope.collector.ingest.wire import decode
    from gpuscope.collector.store.writer import InventoryCache, store_batches

    with_counter = v1_batch(rows=1, node="a", port_values={"xmit_bytes": [INT64_MAX]})
    without = v1_batch(rows=1, node="b", port_values={"rcv_bytes": [7]})
    batches = [decode(json.dumps(doc).encode(), time.time()) for doc in (with_counter, without)]

    async def store() -> None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2, open=False) as pool:
            await pool.open(wait=True)
            await store_batches(pool, batches, InventoryCache())

    asyncio.run(store())
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT n.name, s.xmit_bytes, s.rcv_bytes FROM ib_port_sample s JOIN ib_port USING (port_id)"
            " JOIN node n USING (node_id) ORDER BY n.name"
        ).fetchall()
    assert rows == [("a", INT64_MAX, None), ("b", None, 7)]


def test_nic_rates_read_counters_at_the_bounds(collector: RunningCollector) -> None:
    """A counter at 2^63-1 followed by a reset (legal data), and a row stored by an older collector
    that wrapped 2^63-1 to -2^63: the rates query must answer, not fail with bigint out of range."""
    start = time.time() - 120
    batch = v1_batch(rows=3, start=start, port_values={"xmit_bytes": [INT64_MAX - 10, INT64_MAX, 5]})
    assert post(collector, batch).status_code == 200
    with psycopg.connect(collector.dsn) as conn:
        port_id = one_value(collector.dsn, "SELECT port_id FROM ib_port")
        conn.execute(
            "INSERT INTO ib_port_sample (ts, port_id, xmit_bytes) VALUES (to_timestamp(%s), %s, %s),"
            " (to_timestamp(%s), %s, 100)",
            (start + 10, port_id, -(2**63), start + 11, port_id),
        )
    params: dict[str, Any] = {"node": "node-000", "metric": "xmit_bytes", "minutes": 10, "bucket_seconds": 600}
    response = httpx.get(f"{collector.url}/api/v1/nics/series", params=params, timeout=10)
    assert response.status_code == 200, response.text
    rates = [v for v in response.json()["values"][0] if v is not None]
    assert rates and all(r >= 0 for r in rates), "a counter that went down is left out, never negative"


# ---------------------------------------------------------------------------------------------------
# Finding 4: cheap exhaustion.


def vm_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


@pytest.fixture
def process_collector(dsn: str, tmp_path: Path) -> Iterator[tuple[RunningCollector, int]]:
    """`gpuscope collector` in a process of its own (its memory measured alone), and its pid."""
    token = "hostile-ingest-token-0123456789"
    port = free_loopback_port()
    process = start_collector(dsn, port, token_file(tmp_path / "token", token), "--no-alerts", timeout=60)
    try:
        yield RunningCollector(url=f"http://127.0.0.1:{port}", token=token, dsn=dsn, port=port), process.pid
    finally:
        process.terminate()
        process.wait(30)


def gzip_bomb(json_mib: int) -> bytes:
    """A JSON array of zeros, `json_mib` MiB once decompressed, gzip-compressed in pieces."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b"0," * 2**19  # 1 MiB
    parts = [compressor.compress(b"[")]
    parts += [compressor.compress(piece) for _ in range(json_mib)]
    parts += [compressor.compress(b"0]"), compressor.flush()]
    return b"".join(parts)


def test_gzip_bomb_gets_413_quickly_and_memory_stays_bounded(process_collector: tuple[RunningCollector, int]) -> None:
    collector, pid = process_collector
    bomb = gzip_bomb(200)
    assert len(bomb) < 400_000
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current RSS
    before = vm_kib(pid, "VmRSS")
    started = time.monotonic()
    response = post(collector, bomb, **{"Content-Encoding": "gzip"})
    took = time.monotonic() - started
    peak = vm_kib(pid, "VmHWM")
    assert response.status_code == 413, response.text
    assert took < 2.0, f"{took:.1f} s"
    assert (peak - before) / 1024 < 200, f"the collector grew by {(peak - before) / 1024:.0f} MB"
    assert httpx.get(f"{collector.url}/healthz", timeout=2).status_code == 200


def zeros_v1(rows_per_gpu: int) -> bytes:
    """A batch of 8 GPUs reporting every metric as 0: about the most values (and the most costly to
    decode) a byte of JSON can carry. Gzip-compressed."""
    n = rows_per_gpu * 8
    values = {c.key: [0] * n for c in GPU_COLUMNS}
    batch = v1_batch(rows=rows_per_gpu, gpus=8, gpu_values=values, start=int(time.time()) - rows_per_gpu - 60)
    return gzip.compress(json.dumps(batch).encode(), compresslevel=1)


def test_healthz_answers_while_large_bodies_are_decoded(process_collector: tuple[RunningCollector, int]) -> None:
    """Legal bodies at the JSON limit (decoded in worker threads) and bodies far over it (of the kind
    that took seconds on the event loop; now refused as their decompression passes the limit), pushed
    without pause: /healthz still answers at once."""
    collector, _ = process_collector
    legal = zeros_v1(rows_per_gpu=7000)  # 56,000 rows, 1.7 million values
    oversized = zeros_v1(rows_per_gpu=40_000)
    assert len(gzip.decompress(legal)) < 8 * 2**20 < 4 * 8 * 2**20 < len(gzip.decompress(oversized))
    first = post(collector, legal, **{"Content-Encoding": "gzip"})
    assert first.status_code == 200, first.text  # the copies below are retries: decoded, not written again
    stop = threading.Event()
    statuses: dict[str, list[int]] = {"legal": [], "oversized": []}

    def push(kind: str, body: bytes) -> None:
        headers = {"Authorization": f"Bearer {collector.token}", "Content-Encoding": "gzip"}
        with httpx.Client(timeout=30) as client:
            while not stop.is_set():
                response = client.post(f"{collector.url}/api/v1/samples", content=body, headers=headers)
                statuses[kind].append(response.status_code)

    pushers = [
        threading.Thread(target=push, args=("legal", legal)),
        threading.Thread(target=push, args=("legal", legal)),
        threading.Thread(target=push, args=("oversized", oversized)),
    ]
    for thread in pushers:
        thread.start()
    latencies = []
    try:
        time.sleep(0.3)
        deadline = time.monotonic() + 4
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < deadline:
                started = time.monotonic()
                assert client.get(f"{collector.url}/healthz").status_code == 200
                latencies.append(time.monotonic() - started)
                time.sleep(0.05)
    finally:
        stop.set()
        for thread in pushers:
            thread.join(60)
    assert max(latencies) < 0.5, f"/healthz took up to {max(latencies):.2f} s while batches were decoded"
    assert len(statuses["legal"]) >= 4 and set(statuses["legal"]) == {200}, statuses
    assert statuses["oversized"] and set(statuses["oversized"]) == {413}, statuses


def many_gpus(node: str, bad: bool) -> dict[str, Any]:
    """A batch listing 4,096 GPUs (names unique to `node`); `bad`: one sample out of range."""
    batch = v1_batch(rows=1, gpus=4096, node=node, gpu_values={"util_pct": [50] * 4096})
    if bad:
        batch["gpu_samples"]["values"]["util_pct"][-1] = 1000
    return batch


def test_rejected_batches_leave_no_inventory_cached(collector: RunningCollector) -> None:
    header_rules._checked.clear()
    before = len(header_rules._checked)
    for n in range(40):
        assert post(collector, many_gpus(f"ghost-{n}", bad=True)).status_code == 422
    assert len(header_rules._checked) == before, "a rejected batch's inventory must not be kept"
    accepted = many_gpus("real-node", bad=False)
    assert post(collector, accepted).status_code == 200
    assert len(header_rules._checked) == before + 1, "an accepted one is, to skip its checks next time"


def test_inventory_cache_is_bounded_by_size() -> None:
    memo = header_rules.InventoryMemo(max_bytes=10_000)
    inventory = header_rules.Inventory("c", "r", "n", "b", (), ())
    for n in range(1000):
        memo.put(f"{n:0100d}".encode(), inventory)
    assert memo.nbytes <= 10_000 and len(memo) <= 100
    assert memo.get(f"{999:0100d}".encode()) is inventory, "the newest stay"
    assert memo.get(f"{0:0100d}".encode()) is None, "the least recently used went"


def job_switching(gpus: int, rows_per_gpu: int, node: str = "busy-node") -> dict[str, Any]:
    """Every GPU changes job at every row: job 0, 1, 0, 1, ..."""
    batch = v1_batch(rows=rows_per_gpu, gpus=gpus, node=node, gpu_values={}, port_values={})
    batch["jobs"] = [{"id": "job-a", "user": "alice"}, {"id": "job-b", "user": "bob"}]
    batch["gpu_samples"]["job"] = [i % 2 for i in range(rows_per_gpu) for _ in range(gpus)]
    return batch


def test_a_batch_changing_job_on_every_row_is_refused_quickly(collector: RunningCollector) -> None:
    batch = job_switching(gpus=8, rows_per_gpu=2500)  # 20,000 rows, 2,500 job changes per GPU
    started = time.monotonic()
    response = post(collector, batch)
    took = time.monotonic() - started
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"][:2] == ["gpu_samples", "job"] and "64" in problem["msg"]
    assert took < 2.0, f"{took:.1f} s"
    assert stored(collector) == NOTHING and count_rows(collector.dsn, "job_allocation") == 0


def test_a_batch_at_the_job_change_limit_is_fast_and_holds_up_no_one(collector: RunningCollector) -> None:
    batch = job_switching(gpus=312, rows_per_gpu=64)  # 19,968 rows, each GPU at the limit of 64 runs
    ordinary = v1_batch(node="quiet-node")
    results: dict[str, tuple[int, float]] = {}

    def send(name: str, body: dict[str, Any], delay: float) -> None:
        time.sleep(delay)
        started = time.monotonic()
        status = post(collector, body).status_code
        results[name] = (status, time.monotonic() - started)

    threads = [
        threading.Thread(target=send, args=("busy", batch, 0)),
        threading.Thread(target=send, args=("ordinary", ordinary, 0.2)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert results["busy"][0] == 200 and results["ordinary"][0] == 200, results
    assert results["busy"][1] < 2.0, f"the busy batch took {results['busy'][1]:.1f} s"
    assert results["ordinary"][1] < 1.0, f"the ordinary batch was held up {results['ordinary'][1]:.1f} s"
    assert count_rows(collector.dsn, "job_allocation") == 312 * 64
    open_ones = one_value(collector.dsn, "SELECT count(*) FROM job_allocation WHERE ended_at IS NULL")
    assert open_ones == 312, "each GPU's last run (job-b) is still open"


# ---------------------------------------------------------------------------------------------------
# Finding 8: a node token binds cluster and node.


def test_node_token_is_bound_to_its_cluster_and_node(dsn: str) -> None:
    shared, mine = "shared-token-0123456789", "prod-a-node-000-token-0123"
    with running_collector(dsn, token=shared, node_tokens={"prod-a/node-000": mine}) as collector:
        as_node = replace(collector, token=mine)
        assert post(as_node, v1_batch(cluster="prod-a", node="node-000", seq=1)).status_code == 200
        other_cluster = post(as_node, v1_batch(cluster="prod-b", node="node-000", seq=2))
        assert other_cluster.status_code == 403, other_cluster.text
        assert other_cluster.json()["detail"][0]["loc"] == ["source", "cluster"]
        other_node = post(as_node, v1_batch(cluster="prod-a", node="node-001", seq=3))
        assert other_node.status_code == 403 and other_node.json()["detail"][0]["loc"] == ["source", "node"]
        assert post(collector, v1_batch(cluster="prod-b", node="node-000", seq=4)).status_code == 200
    with psycopg.connect(dsn) as conn:
        nodes = conn.execute("SELECT cluster, name FROM node ORDER BY cluster").fetchall()
    assert nodes == [("prod-a", "node-000"), ("prod-b", "node-000")]
    assert count_rows(dsn, "ingest_batch") == 2


def test_node_token_moves_its_own_node_between_racks_only(dsn: str) -> None:
    shared, mine = "shared-token-0123456789", "prod-a-node-000-token-0123"
    tokens = {"prod-a/node-000": mine, "prod-a/node-001": "prod-a-node-001-token-0123"}
    with running_collector(dsn, token=shared, node_tokens=tokens) as collector:
        as_node = replace(collector, token=mine)
        assert post(collector, v1_batch(cluster="prod-a", node="node-001", rack="r1")).status_code == 200
        assert post(as_node, v1_batch(cluster="prod-a", node="node-000", rack="r1")).status_code == 200
        moved = post(as_node, v1_batch(cluster="prod-a", node="node-000", rack="r2", seq=2))
        assert moved.status_code == 200, "a node moved to another rack: its exporter's --rack changed"
        hijack = post(as_node, v1_batch(cluster="prod-a", node="node-001", rack="r9", seq=3))
        assert hijack.status_code == 403
    with psycopg.connect(dsn) as conn:
        racks = dict(conn.execute("SELECT name, rack FROM node").fetchall())
    assert racks == {"node-000": "r2", "node-001": "r1"}


def test_node_tokens_file_needs_cluster_and_node(tmp_path: Path) -> None:
    from gpuscope.collector.api.auth import read_node_tokens
    from gpuscope.core.tokens import TokenError

    good = tmp_path / "tokens"
    good.write_text("# CLUSTER/NODE TOKEN\nprod-a/gpu-01 aaaaaaaaaaaaaaaaaaaa\nsite/b/gpu-02 bbbbbbbbbbbbbbbbbbbb\n")
    good.chmod(0o600)
    assert read_node_tokens(good) == {("prod-a", "gpu-01"): "a" * 20, ("site/b", "gpu-02"): "b" * 20}
    for text, message in (
        ("gpu-01 aaaaaaaaaaaaaaaaaaaa\n", "CLUSTER/NODE"),  # the old form named no cluster
        ("/gpu-01 aaaaaaaaaaaaaaaaaaaa\n", "CLUSTER/NODE"),
        ("prod-a/ aaaaaaaaaaaaaaaaaaaa\n", "CLUSTER/NODE"),
        ("a/n aaaaaaaaaaaaaaaaaaaa\nb/n aaaaaaaaaaaaaaaaaaaa\n", "same token"),
    ):
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(TokenError, match=message):
            read_node_tokens(bad)


# ---------------------------------------------------------------------------------------------------
# Finding 11: parsing as strict as the document.


@pytest.mark.parametrize("version", [True, 1.0, "1", None])
def test_version_must_be_the_integer_1(collector: RunningCollector, version: Any) -> None:
    batch = v1_batch()
    batch["version"] = version
    response = post(collector, batch)
    assert response.status_code == 422, response.text
    assert response.json()["detail"][0]["loc"] == ["version"]
    assert stored(collector) == NOTHING


def test_v2_version_must_be_the_integer_2(collector: RunningCollector) -> None:
    body = with_header(binary_batch(), lambda h: h.update(version=2.0))
    response = post(collector, body, **{"Content-Type": BINARY})
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["version"]


@pytest.mark.parametrize(
    ("mangle", "needle"),
    [
        (lambda z: z[:-8], "truncated"),  # no trailer (CRC-32 and size)
        (lambda z: z[:-4], "truncated"),
        (lambda z: z + b"trailing garbage", "after the gzip data"),
        (lambda z: z + b"\0\0\0\0", "after the gzip data"),
        (lambda z: z[:-8] + (zlib.crc32(b"x")).to_bytes(4, "little") + z[-4:], "invalid gzip"),
    ],
)
def test_broken_gzip_gets_400(collector: RunningCollector, mangle: Any, needle: str) -> None:
    body = mangle(gzip.compress(json.dumps(v1_batch()).encode()))
    response = post(collector, body, **{"Content-Encoding": "gzip"})
    assert response.status_code == 400, response.text
    assert needle in response.json()["detail"][0]["msg"]
    assert stored(collector) == NOTHING


def test_gzip_in_several_members_is_gzip(collector: RunningCollector) -> None:
    text = json.dumps(v1_batch()).encode()
    body = gzip.compress(text[:100]) + gzip.compress(text[100:])
    assert post(collector, body, **{"Content-Encoding": "gzip"}).status_code == 200


def shift_rows(block: str, by: int) -> Any:
    return lambda body: with_header(body, lambda h: h[block].update(rows=h[block]["rows"] + by))


@pytest.mark.parametrize(
    "mangle",
    [
        shift_rows("gpu_samples", -1),
        shift_rows("gpu_samples", +1),
        shift_rows("port_samples", -1),
        shift_rows("port_samples", +3),
        lambda b: with_header(b, lambda h: h["gpu_samples"]["values"].pop()),  # a column fewer than sent
        lambda b: with_header(b, lambda h: h.pop("jobs")),  # the job column is there, the header says not
    ],
)
def test_v2_row_counts_that_do_not_match_the_body_get_400(collector: RunningCollector, mangle: Any) -> None:
    response = post(collector, mangle(binary_batch()), **{"Content-Type": BINARY})
    assert response.status_code == 400, response.text
    assert stored(collector) == NOTHING


def test_v2_padding_must_be_zero(collector: RunningCollector) -> None:
    body = binary_batch()
    for width in range(1, 9):  # an ignored member of the header, so that padding follows it
        body = with_header(body, lambda h, width=width: h.update(pad="x" * width))
        _, start = split(body)
        header_end = 8 + int.from_bytes(body[4:8], "little")
        if header_end < start:
            break
    bad = body[:header_end] + b"\x01" + body[header_end + 1 :]
    response = post(collector, bad, **{"Content-Type": BINARY})
    assert response.status_code == 400 and "padding" in response.text


def test_json_text_over_the_documented_limit_gets_413(collector: RunningCollector) -> None:
    batch = v1_batch()
    batch["padding"] = "x" * (8 * 2**20)  # unknown members are ignored, but they count
    response = post(collector, gzip.compress(json.dumps(batch).encode()), **{"Content-Encoding": "gzip"})
    assert response.status_code == 413, response.text
    response = post(collector, json.dumps(batch).encode())
    assert response.status_code == 413, response.text


# ---------------------------------------------------------------------------------------------------
# Finding 12: the document is the contract, complete and true.


def documented_example() -> str:
    """The one complete version 1 example of docs/ingest-format.md, as written there."""
    text = DOC.read_text(encoding="utf-8")
    found = re.search(r"^## A complete example\b.*?^```json\n(.*?)^```", text, re.S | re.M)
    assert found, "docs/ingest-format.md has a '## A complete example' section with a ```json block"
    return found.group(1)


def test_the_documented_example_is_accepted_verbatim(dsn: str) -> None:
    body = documented_example().encode()
    days = {"retention_days": 36500, "minute_rollup_days": 36500, "hour_rollup_days": 36500}
    with running_collector(dsn, **days) as collector:  # its timestamps are in the past
        response = post(collector, body)
        assert response.status_code == 200, response.text
        doc = json.loads(body)
        assert response.json() == {
            "duplicate": False,
            "gpu_rows": len(doc["gpu_samples"]["ts"]),
            "port_rows": len(doc["port_samples"]["ts"]),
            "mig_rows": 0,
            "ignored_fields": [],
        }
    assert count_rows(dsn, "event") == len(doc["events"])
    assert count_rows(dsn, "job_allocation") >= 1


def test_the_document_covers_every_field_of_the_example() -> None:
    doc = json.loads(documented_example())
    text = DOC.read_text(encoding="utf-8")
    fields = set(doc) | {f"source.{k}" for k in doc["source"]} | {f"gpus[].{k}" for k in doc["gpus"][0]}
    fields |= {f"ports[].{k}" for k in doc["ports"][0]} | {f"jobs[].{k}" for k in doc["jobs"][0]}
    fields |= {f"gpu_samples.{k}" for k in doc["gpu_samples"]} | {f"port_samples.{k}" for k in doc["port_samples"]}
    fields |= {f"events[].{k}" for k in doc["events"][0]}
    missing = [f for f in sorted(fields) if f"`{f}`" not in text]
    assert not missing, f"fields of the example with no row in the document: {missing}"


def test_ports_may_be_omitted_on_a_node_without_infiniband(collector: RunningCollector) -> None:
    batch = v1_batch()
    del batch["ports"], batch["port_samples"]
    response = post(collector, batch)
    assert response.status_code == 200, response.text
    assert response.json()["port_rows"] == 0


def test_port_samples_must_be_an_object_when_present(collector: RunningCollector) -> None:
    batch = v1_batch()
    batch["port_samples"] = False
    response = post(collector, batch)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"] == ["port_samples"]


@pytest.mark.parametrize(("job", "status"), [(None, 200), (-1, 200), (0, 200), (-2, 422), (0.5, 422), (1, 422)])
def test_v1_job_references_as_documented(collector: RunningCollector, job: Any, status: int) -> None:
    """null or -1: no job (the document says so for both versions); else a position in `jobs`."""
    batch = v1_batch(rows=1, gpus=1)
    batch["jobs"] = [{"id": "42", "user": None}]
    batch["gpu_samples"]["job"] = [job]
    response = post(collector, batch)
    assert response.status_code == status, response.text
    if status == 200:
        assert count_rows(collector.dsn, "job_allocation") == (1 if job == 0 else 0)
    text = DOC.read_text(encoding="utf-8")
    assert re.search(r"`gpu_samples\.job`.*null.*-1", text), "the document gives both ways to say 'no job'"


def test_openapi_documents_both_request_bodies(collector: RunningCollector) -> None:
    spec = httpx.get(f"{collector.url}/openapi.json").json()
    body = spec["paths"]["/api/v1/samples"]["post"]["requestBody"]
    content = body["content"]
    schema = content["application/json"]["schema"]
    assert set(schema["required"]) >= {"format", "version", "exporter_id", "seq", "source", "gpus", "gpu_samples"}
    assert "ports" not in schema["required"]
    assert set(schema["properties"]) >= {"jobs", "events", "ports", "port_samples"}
    assert schema["properties"]["version"] == {"type": "integer", "enum": [1]}
    assert content[BINARY]["schema"]["format"] == "binary"
    assert "ingest-format.md" in body["description"]
    example = content["application/json"]["example"]
    assert example == json.loads(documented_example())


def reference_allocations(
    batches: list[tuple[list[float], list[int], list[int | None], list[tuple[str, str]]]],
) -> list:
    """What the one-run-at-a-time rules (the statement-per-run writer this replaced) make of `batches`:
    each (ts, gpu, job position, jobs) in the order posted."""
    table: list[dict[str, Any]] = []
    for ts, gpus, jobs, job_list in batches:
        for gpu in sorted(set(gpus)):
            rows = sorted((t, j) for t, g, j in zip(ts, gpus, jobs, strict=True) if g == gpu)
            runs: list[list[Any]] = []
            for t, j in rows:
                if runs and runs[-1][0] == j:
                    runs[-1][2] = t
                else:
                    runs.append([j, t, t])
            for j, first, last in runs:
                job = None if j is None else job_list[j]
                first_us, last_us = round(first * 1e6), round(last * 1e6)
                open_row = next((a for a in table if a["gpu"] == gpu and a["ended"] is None), None)
                if open_row is not None and last_us <= open_row["last"]:
                    continue
                if open_row is not None and job is not None and open_row["job"] == job[0]:
                    open_row["last"] = last_us
                    continue
                if open_row is not None:
                    open_row["ended"] = max(first_us, open_row["started"])
                if job is not None:
                    allocation = {"gpu": gpu, "job": job[0], "user": job[1], "started": first_us, "last": last_us}
                    table.append({**allocation, "ended": None})
    return sorted((a["gpu"], a["job"], a["user"], a["started"], a["last"], a["ended"]) for a in table)


def test_allocations_written_set_wise_follow_the_one_run_at_a_time_rules(collector: RunningCollector) -> None:
    rng = np.random.default_rng(16)
    job_list = [("a", "alice"), ("b", "bob"), ("a", "carol")]  # two entries for job a: one job
    base = int(time.time()) - 3000
    exporter = str(uuid.uuid4())
    sent = []
    for seq in range(1, 41):
        start = base + int(rng.integers(0, 2000))  # batches overlap, arrive late, repeat times
        seconds = int(rng.integers(1, 12))
        ts, gpus, jobs = [], [], []
        for second in range(seconds):
            for gpu in range(3):
                ts.append(start + second + 0.25)
                gpus.append(gpu)
                jobs.append(None if rng.random() < 0.3 else int(rng.integers(0, 3)))
        batch = v1_batch(rows=seconds, gpus=3, seq=seq, gpu_values={}, port_values={})
        batch["exporter_id"] = exporter
        batch["jobs"] = [{"id": i, "user": u} for i, u in job_list]
        batch["gpu_samples"].update(ts=ts, gpu=gpus, job=jobs, up=[True] * len(ts))
        assert post(collector, batch).status_code == 200
        sent.append((ts, gpus, jobs, job_list))
    with psycopg.connect(collector.dsn) as conn:
        stored_rows = conn.execute(
            "SELECT g.gpu_index, a.job_id, a.username, (extract(epoch FROM a.started_at) * 1000000)::bigint,"
            " (extract(epoch FROM a.last_seen) * 1000000)::bigint, (extract(epoch FROM a.ended_at) * 1000000)::bigint"
            " FROM job_allocation a JOIN gpu g USING (gpu_id)"
        ).fetchall()
    assert sorted(stored_rows) == reference_allocations(sent)
