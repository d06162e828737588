"""POST /api/v1/samples fed valid batches (docs/ingest-format.md, versions 1 and 2) with hypothesis's
mutations: values of the wrong type, numbers past every bound, NUL, lone surrogates and control
characters in strings, NaN and 1e400 in the JSON text, columns and headers that lie about their lengths,
flipped, cut and added bytes, and gzip that is corrupt, cut short, followed by garbage or not gzip at all.

For every request: an answer within 5 s, 2xx or 4xx (never 5xx); after a 4xx nothing stored (the rows of
every table ingest writes unchanged); after a 2xx exactly the rows the body carries (or none, for a batch
sent again), and a batch left intact is always stored. About 600 deterministic examples, a few seconds
on two cores; the last test checks the collector's memory, database and log after all of it."""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import math
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg import sql

from tests.hostile.batches import BINARY, v1_batch, v2_assemble, v2_parts
from tests.hostile.conftest import (
    HOSTILE,
    NODE_CLUSTER,
    NODE_NAME,
    RESPONSE_LIMIT_S,
    HostileCollector,
    check_after_fuzz,
)

# Every table a batch writes to; a refused batch leaves each as it was.
TABLES = ("node", "gpu", "ib_port", "ingest_batch", "job_allocation", "event", "gpu_sample", "ib_port_sample")
COUNT_ALL = sql.SQL("SELECT {}").format(
    sql.SQL(", ").join(sql.SQL("(SELECT count(*) FROM {})").format(sql.Identifier(table)) for table in TABLES)
)

JSON_EXAMPLES = 250
BINARY_EXAMPLES = 250
WRAPPING_EXAMPLES = 100

_exporter_ids = itertools.count(1)


@dataclass
class Ingest:
    collector: HostileCollector
    conn: psycopg.Connection[Any]
    client: httpx.Client
    statuses: Counter[int] = field(default_factory=Counter)  # answers seen

    def counts(self) -> dict[str, int]:
        row = self.conn.execute(COUNT_ALL).fetchone()
        assert row is not None
        return dict(zip(TABLES, row, strict=True))


@pytest.fixture(scope="module")
def ingest(hostile_collector: HostileCollector) -> Iterator[Ingest]:
    """The collector, warmed up with one batch of each version (its baseline taken after them), a
    connection to count its rows, and an HTTP client."""
    with (
        psycopg.connect(hostile_collector.dsn, autocommit=True) as conn,
        httpx.Client(timeout=RESPONSE_LIMIT_S) as client,
    ):
        for version in (1, 2):
            batch = Batch(v1_batch(exporter_id=new_exporter_id(), seq=0, node="warm-up"), version, "shared", True)
            response = client.post(f"{hostile_collector.url}/api/v1/samples", content=batch.body(),
                                   headers=batch.headers(hostile_collector))  # fmt: skip
            assert response.status_code == 200, response.text
        yield Ingest(hostile_collector.with_baseline(), conn, client)


def new_exporter_id() -> str:
    """A UUID of its own for every request (a retried batch is made on purpose, by `send_twice`), from a
    counter rather than at random, so that every run sends the same bytes."""
    return str(uuid.UUID(int=(0xF022 << 112) | next(_exporter_ids)))


# ---------------------------------------------------------------------------------------------------
# The request: a valid batch, then what the mutations made of it.


@dataclass
class Batch:
    """A request in three stages: the batch as data (`doc`, and for version 2 its `header`), the body
    before Content-Encoding (`plain`, once a mutation works on its bytes), and the body as sent (`raw`,
    once a mutation works on those)."""

    doc: dict[str, Any]  # the version 1 batch it starts from
    version: int
    token: str  # "shared" or "node"
    gzipped: bool
    header: dict[str, Any] | None = None  # version 2: its header, once a mutation changes it
    plain: bytes | None = None
    raw: bytes | None = None
    content_type: str | None = None  # None: the version's own
    content_encoding: str | None = None  # None: gzip or none, as `gzipped` says
    mutated: list[str] = field(default_factory=list)

    def text_and_blocks(self) -> tuple[bytes, list[bytes]]:
        """The JSON text (the version 1 body, or the version 2 header) and version 2's blocks."""
        if self.version == 1:
            return json.dumps(self.doc, separators=(",", ":")).encode(), []  # NaN and lone surrogates survive
        header, blocks = v2_parts(self.doc)
        return json.dumps(self.header if self.header is not None else header, separators=(",", ":")).encode(), blocks

    def plain_body(self) -> bytes:
        if self.plain is not None:
            return self.plain
        text, blocks = self.text_and_blocks()
        return text if self.version == 1 else v2_assemble(text, blocks)

    def body(self) -> bytes:
        if self.raw is not None:
            return self.raw
        plain = self.plain_body()
        return gzip.compress(plain, mtime=0) if self.gzipped else plain

    def headers(self, collector: HostileCollector) -> dict[str, str]:
        token = collector.node if self.token == "node" else collector.ingest
        headers = {"Authorization": f"Bearer {token}"}
        headers["Content-Type"] = self.content_type or ("application/json" if self.version == 1 else BINARY)
        encoding = self.content_encoding if self.content_encoding is not None else ("gzip" if self.gzipped else "")
        if encoding:
            headers["Content-Encoding"] = encoding
        return headers


@st.composite
def valid_batches(draw: st.DrawFn, version: int) -> Batch:
    """A batch the collector stores: 1-3 GPUs, 1-3 snapshots, 0-2 ports, jobs and events, for one of a
    few nodes, with the shared token or (for its own node) the node's token."""
    token = draw(st.sampled_from(["shared", "node"]), label="token")
    cluster, node = (
        (NODE_CLUSTER, NODE_NAME) if token == "node" else ("fuzz", draw(st.sampled_from(["node-a", "node-b"])))
    )
    doc = v1_batch(
        exporter_id=new_exporter_id(),
        seq=draw(st.integers(0, 2**63 - 1), label="seq"),
        cluster=cluster,
        node=node,
        gpus=draw(st.integers(1, 3), label="gpus"),
        rows=draw(st.integers(1, 3), label="rows"),
        ports=draw(st.integers(0, 2), label="ports"),
        jobs=draw(st.integers(0, 2), label="jobs"),
        events=draw(st.integers(0, 2), label="events"),
        start=int(time.time()) - 120,
    )
    if not doc["ports"] and draw(st.booleans(), label="no port block"):
        del doc["ports"], doc["port_samples"]  # both optional in version 1 (version 2 wants the block)
        if version == 2:
            doc["ports"], doc["port_samples"] = [], {"ts": [], "port": [], "values": {}}
    return Batch(doc, version, token, gzipped=draw(st.booleans(), label="gzip"))


# Values put where they do not belong: each type JSON has, numbers past every bound, and strings no
# name may be (NUL, a lone surrogate, control characters, a forged log line, too long, empty).
HOSTILE_VALUES = st.sampled_from([
    None, True, False, 0, -1, 1.5, -0.0, 2**31, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1, 10**30, 1e308,
    -1e308, 5e-324, math.nan, math.inf, -math.inf, "", "1", "a\x00b", "\ud800", "\udfff", "x\x1b[31m", "\t\r\n",
    "line\nINFO forged", "\u202egnp.exe", "🔥" * 64, "n" * 129, "n" * 70_000, [], [None], {}, {"a": {"b": [1]}},
    [[[[[[[[[[[]]]]]]]]]]],
])  # fmt: skip

# Tokens put in place of a number in the JSON text: what json.dumps would never write.
RAW_TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400", b"9223372036854775808", b"1" + b"0" * 400,
              b"1.0e-400", b'"\\ud800"', b'"\\u0000"', b"0x10", b"01", b"+1", b".5", b"1.", b"[]", b"{}"]  # fmt: skip


def position(draw: st.DrawFn, size: int, label: str) -> int:
    """A position in something `size` long, drawn as a fraction of it: a body's length changes from run
    to run (its timestamps, and how well it compresses), and what is drawn must not depend on it."""
    return draw(st.integers(0, 9_999), label=label) * size // 10_000


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, (*at, index))


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        doc = doc[step]
    return doc


def _target(batch: Batch) -> dict[str, Any]:
    """What structural mutations change: the version 1 document, or the version 2 header."""
    if batch.version == 1:
        return batch.doc
    if batch.header is None:
        batch.header, _ = v2_parts(batch.doc)
    return batch.header


def replace_a_value(draw: st.DrawFn, batch: Batch) -> None:
    doc = _target(batch)
    path = draw(st.sampled_from([p for p in _paths(doc) if p]), label="path")
    _parent(doc, path)[path[-1]] = copy.deepcopy(draw(HOSTILE_VALUES, label="value"))  # later ones may change it
    batch.mutated.append(f"replace {path}")


def replace_a_name(draw: st.DrawFn, batch: Batch) -> None:
    doc = _target(batch)
    names = [p for p in _paths(doc) if p and isinstance(_parent(doc, p)[p[-1]], str)]
    if not names:
        return
    path = names[position(draw, len(names), "path")]
    value = draw(st.sampled_from(["a\x00b", "\ud800", "\x07", "\x7f", "\u0085", "a\nb", "n" * 129, "", " "]) |
                 st.text(min_size=1, max_size=40), label="name")  # fmt: skip
    _parent(doc, path)[path[-1]] = value
    batch.mutated.append(f"name {path}")


def speak_for_another_node(draw: st.DrawFn, batch: Batch) -> None:
    """Another node's or cluster's name, valid as a name: the shared token may send it, a node's may not."""
    source = _target(batch).get("source")
    if not isinstance(source, dict):
        return
    key = draw(st.sampled_from(["cluster", "node", "rack"]), label="source")
    source[key] = draw(
        st.sampled_from(["node-a", "fuzz", "other", NODE_NAME + "x", NODE_CLUSTER.upper()]), label="name"
    )
    batch.mutated.append(f"source {key}")


def delete_a_member(draw: st.DrawFn, batch: Batch) -> None:
    doc = _target(batch)
    path = draw(st.sampled_from([p for p in _paths(doc) if p]), label="path")
    del _parent(doc, path)[path[-1]]
    batch.mutated.append(f"delete {path}")


def shorten_a_column(draw: st.DrawFn, batch: Batch) -> None:
    """One column of a sample block one entry short or long: it no longer matches the others."""
    blocks = [batch.doc[key] for key in ("gpu_samples", "port_samples") if isinstance(batch.doc.get(key), dict)]
    columns = [(block, k) for block in blocks for k in block if isinstance(block[k], list)]
    columns += [(b["values"], k) for b in blocks if isinstance(b.get("values"), dict) for k in b["values"]
                if isinstance(b["values"][k], list)]  # fmt: skip
    if not columns:  # an earlier mutation left no column
        return
    owner, key = columns[position(draw, len(columns), "column")]
    if owner[key] and draw(st.booleans(), label="shorter"):
        owner[key].pop()
    else:
        owner[key].append(owner[key][-1] if owner[key] else 0)
    batch.mutated.append(f"column {key} length")


def raw_token(draw: st.DrawFn, batch: Batch) -> None:
    """A number in the JSON text (the version 1 body, or the version 2 header) replaced by a token."""
    text, blocks = batch.text_and_blocks()
    numbers = [i for i in range(1, len(text)) if text[i - 1 : i] in (b":", b",", b"[") and text[i : i + 1].isdigit()]
    if not numbers:  # an earlier mutation left no number
        return
    at = numbers[position(draw, len(numbers), "number")]
    stop = at
    while stop < len(text) and text[stop : stop + 1] in b"0123456789.eE+-":
        stop += 1
    token = draw(st.sampled_from(RAW_TOKENS), label="token")
    text = text[:at] + token + text[stop:]
    batch.plain = text if batch.version == 1 else v2_assemble(text, blocks)
    batch.mutated.append(f"token {token[:12]!r}")


def lie_about_rows(draw: st.DrawFn, batch: Batch) -> None:
    """Version 2: a block's `rows` or `values` that does not match the arrays sent."""
    block = _target(batch).get(draw(st.sampled_from(["gpu_samples", "port_samples"]), label="block"))
    change = draw(st.sampled_from(["rows+1", "rows-1", "rows huge", "rows type", "values+", "values-", "values dup"]))
    if not (isinstance(block, dict) and isinstance(block.get("rows"), int) and isinstance(block.get("values"), list)):
        return  # an earlier mutation broke the block already
    if change == "rows+1":
        block["rows"] += 1
    elif change == "rows-1":
        block["rows"] -= 1
    elif change == "rows huge":
        block["rows"] = draw(st.sampled_from([1_000_001, 2**31, 2**64, -1]))
    elif change == "rows type":
        block["rows"] = draw(st.sampled_from([1.5, "2", None, True, [1]]))
    elif change == "values+":
        block["values"].append(draw(st.sampled_from(["util_pct", "no_such_key", "", "x" * 200])))
    elif change == "values-" and block["values"]:
        block["values"].pop()
    else:
        block["values"] = block["values"] + block["values"][:1]
    batch.mutated.append(f"v2 {change}")


def poke_the_arrays(draw: st.DrawFn, batch: Batch) -> None:
    """Version 2: a value in the binary columns overwritten: a hostile double, or bytes at random (a
    device index past the GPUs, an `up` of 7, a job past the jobs)."""
    body = batch.plain_body()
    data_start = 8 + int.from_bytes(body[4:8], "little")
    data_start += -data_start % 8
    if data_start >= len(body):
        return
    at = data_start + position(draw, len(body) - data_start, "offset")
    if draw(st.booleans(), label="double"):
        value = draw(st.sampled_from([math.nan, math.inf, -math.inf, -1.0, 1e300, 2.0**63, 2.0**64, -0.0,
                                      time.time() + 3600, 0.0, 1e-310]))  # fmt: skip
        new = struct.pack("<d", value)
        at -= (at - data_start) % 8
    else:
        new = draw(st.binary(min_size=1, max_size=4), label="bytes")
    batch.plain = body[:at] + new + body[at + len(new) :]
    batch.mutated.append("v2 poke")


def lie_about_the_header_length(draw: st.DrawFn, batch: Batch) -> None:
    body = batch.plain_body()
    told = int.from_bytes(body[4:8], "little")
    lie = draw(
        st.sampled_from([0, 1, told - 1, told + 1, told + 8, len(body), len(body) + 1, 8 * 2**20 + 1, 2**32 - 1])
    )
    body = body[:4] + max(0, lie).to_bytes(4, "little") + body[8:]
    if draw(st.booleans(), label="wrong magic"):
        body = draw(st.sampled_from([b"GPSA", b"gpsb", b"\0\0\0\0", b'{"fo'])) + body[4:]
    batch.plain = body
    batch.mutated.append("v2 header length")


def flip_bytes(draw: st.DrawFn, batch: Batch) -> None:
    """Bytes of the body as sent (compressed or not) flipped, cut off, inserted or removed."""
    body = bytearray(batch.body())
    how = draw(st.sampled_from(["flip", "truncate", "insert", "remove"]), label="how")
    at = position(draw, len(body), "at")
    if how == "flip":
        for i in range(draw(st.integers(1, 4), label="flips")):
            body[(at + i * 7) % len(body)] ^= draw(st.integers(1, 255), label="mask")
    elif how == "truncate":
        del body[at:]
    elif how == "insert":
        body[at:at] = draw(st.binary(min_size=1, max_size=32), label="inserted")
    else:
        del body[at : at + draw(st.integers(1, 64), label="removed")]
    batch.raw = bytes(body)
    batch.mutated.append(f"bytes {how}")


def break_the_gzip(draw: st.DrawFn, batch: Batch) -> None:
    """gzip data that is not complete (docs: 400), or that is fine but says something else."""
    batch.gzipped = True
    plain = batch.plain_body()
    packed = gzip.compress(plain, mtime=0)
    how = draw(st.sampled_from(["cut", "crc", "size", "garbage after", "two members", "deflate only", "not gzip",
                                "gzip sent as identity", "empty"]), label="how")  # fmt: skip
    if how == "cut":
        packed = packed[: position(draw, len(packed), "kept")]
    elif how == "crc":
        packed = packed[:-8] + bytes(b ^ 0xFF for b in packed[-8:-4]) + packed[-4:]
    elif how == "size":
        packed = packed[:-4] + (len(plain) + 1).to_bytes(4, "little")
    elif how == "garbage after":
        packed += draw(st.binary(min_size=1, max_size=16), label="garbage")
    elif how == "two members":
        packed += gzip.compress(plain, mtime=0)  # complete gzip, but the batch twice over: not one document
    elif how == "deflate only":
        packed = packed[10:-8]
    elif how == "not gzip":
        packed = plain
    elif how == "gzip sent as identity":
        batch.content_encoding = "identity"
    else:
        packed = b""
    batch.raw = packed
    batch.mutated.append(f"gzip {how}")


def mix_up_the_headers(draw: st.DrawFn, batch: Batch) -> None:
    """A Content-Type or Content-Encoding that does not say what the body is, or is not one at all."""
    if draw(st.booleans(), label="type"):
        batch.content_type = draw(st.sampled_from(["application/json" if batch.version == 2 else BINARY,
                                                   "text/plain", "application/x-www-form-urlencoded", "*/*",
                                                   "application/json; charset=latin-1", BINARY + "; v=9",
                                                   ";"]))  # fmt: skip
        batch.mutated.append(f"content-type {batch.content_type}")
    else:
        batch.content_encoding = draw(
            st.sampled_from(["br", "deflate", "gzip, gzip", "x-gzip", "GZIP", "identity, gzip"])
        )
        batch.mutated.append(f"content-encoding {batch.content_encoding}")


Mutation = Callable[[st.DrawFn, Batch], None]


@dataclass(frozen=True)
class Mutations:
    """What may be done to a batch, in the order it is done: to the data, to the body's bytes before
    Content-Encoding, then to the request as sent."""

    data: tuple[Mutation, ...] = ()
    plain: tuple[Mutation, ...] = ()
    sent: tuple[Mutation, ...] = ()
    at_least_one: bool = False


DATA = (replace_a_value, replace_a_name, speak_for_another_node, delete_a_member)
JSON_MUTATIONS = Mutations(data=(*DATA, shorten_a_column), plain=(raw_token,), sent=(flip_bytes,))
BINARY_MUTATIONS = Mutations(data=(*DATA, lie_about_rows), plain=(raw_token, poke_the_arrays,
                             lie_about_the_header_length), sent=(flip_bytes,))  # fmt: skip
WRAPPING_MUTATIONS = Mutations(sent=(break_the_gzip, mix_up_the_headers), at_least_one=True)


@st.composite
def mutated(draw: st.DrawFn, version: int, mutations: Mutations) -> Batch:
    """A valid batch and what `mutations` make of it (maybe nothing: then it must be stored as it is)."""
    batch = draw(valid_batches(version))
    for stage, most in ((mutations.data, 2), (mutations.plain, 1), (mutations.sent, 1)):
        if stage:
            least = 1 if mutations.at_least_one and stage is mutations.sent else 0
            for mutation in draw(st.lists(st.sampled_from(stage), min_size=least, max_size=most), label="mutations"):
                mutation(draw, batch)
    return batch


# ---------------------------------------------------------------------------------------------------
# The oracle.


def carried(body: bytes, gzipped: bool) -> dict[str, int]:
    """What a body the collector accepted carries, read as docs/ingest-format.md says."""
    raw = gzip.decompress(body) if gzipped else body
    if raw[:4] == b"GPSB":
        doc = json.loads(raw[8 : 8 + int.from_bytes(raw[4:8], "little")])
        gpu_rows, port_rows = doc["gpu_samples"]["rows"], doc["port_samples"]["rows"]
    else:
        doc = json.loads(raw)
        gpu_rows, port_rows = len(doc["gpu_samples"]["ts"]), len((doc.get("port_samples") or {}).get("ts") or [])
    return {
        "gpu_rows": gpu_rows,
        "port_rows": port_rows,
        "events": len(doc.get("events") or []),
        "gpus": len(doc["gpus"]),
    }


def send(ingest: Ingest, batch: Batch) -> None:
    """Post the batch; check the answer and what was stored against what it carries."""
    collector = ingest.collector
    body, headers = batch.body(), batch.headers(collector)
    before = ingest.counts()
    started = time.monotonic()
    response = ingest.client.post(f"{collector.url}/api/v1/samples", content=body, headers=headers)
    took = time.monotonic() - started
    added = {table: count - before[table] for table, count in ingest.counts().items()}
    what = f"{batch.mutated or 'intact'} v{batch.version} gzip={batch.gzipped}: {response.status_code}"
    what += f" {response.text[:300]}"
    ingest.statuses[response.status_code] += 1

    assert took <= RESPONSE_LIMIT_S, f"{what}: answered after {took:.1f} s"
    assert response.status_code < 500, what
    assert response.status_code in (200, 400, 403, 413, 415, 422), f"not an answer the format lists: {what}"
    if response.status_code != 200:
        assert not any(added.values()), f"{what}: refused, yet stored {added}"
        assert batch.mutated, f"a valid batch was refused: {what}"
        return
    answer = response.json()
    if answer["duplicate"]:
        assert not any(added.values()), f"{what}: a retried batch stored {added}"
        return
    sent = carried(body, gzipped=headers.get("Content-Encoding", "").lower() == "gzip")
    assert (answer["gpu_rows"], answer["port_rows"]) == (sent["gpu_rows"], sent["port_rows"]), what
    assert (added["gpu_sample"], added["ib_port_sample"]) == (sent["gpu_rows"], sent["port_rows"]), f"{what}: {added}"
    assert (added["event"], added["ingest_batch"]) == (sent["events"], 1), f"{what}: stored {added}"
    assert added["node"] <= 1 and added["gpu"] <= sent["gpus"], f"{what}: stored {added}"
    assert added["job_allocation"] <= sent["gpu_rows"], f"{what}: stored {added}"


def test_json_batches_mutated(ingest: Ingest) -> None:
    @settings(HOSTILE, max_examples=JSON_EXAMPLES)
    @given(batch=mutated(1, JSON_MUTATIONS))
    def run(batch: Batch) -> None:
        send(ingest, batch)

    run()


def test_binary_batches_mutated(ingest: Ingest) -> None:
    @settings(HOSTILE, max_examples=BINARY_EXAMPLES)
    @given(batch=mutated(2, BINARY_MUTATIONS))
    def run(batch: Batch) -> None:
        send(ingest, batch)

    run()


def test_compression_and_headers_mutated(ingest: Ingest) -> None:
    @settings(HOSTILE, max_examples=WRAPPING_EXAMPLES)
    @given(batch=st.sampled_from([1, 2]).flatmap(lambda version: mutated(version, WRAPPING_MUTATIONS)))
    def run(batch: Batch) -> None:
        send(ingest, batch)

    run()


def test_a_batch_sent_twice_is_stored_once(ingest: Ingest) -> None:
    @settings(HOSTILE, max_examples=5)
    @given(batch=st.sampled_from([1, 2]).flatmap(valid_batches))
    def run(batch: Batch) -> None:
        send(ingest, batch)
        send(ingest, batch)  # the same (exporter_id, seq): 200, duplicate, nothing stored

    run()


def test_the_fuzz_reached_each_kind_of_answer(ingest: Ingest) -> None:
    """The mutations are not all refused at the first check: batches were stored, and refused for each
    reason the format lists that a mutation can cause (the examples are the same on every run, whatever
    the clock or the load: they read the answers of the tests above, run before it in this process, as
    tests/conftest.py keeps a file's tests together under pytest -n)."""
    answered = sum(ingest.statuses.values())
    assert answered >= JSON_EXAMPLES + BINARY_EXAMPLES + WRAPPING_EXAMPLES, (
        f"only {answered} answers seen in this process: the fuzz tests above did not all run here first"
    )
    assert {200, 400, 403, 415, 422} <= set(ingest.statuses), ingest.statuses


def test_after_all_of_it_the_collector_is_well(ingest: Ingest) -> None:
    """Last in the module: memory back near its baseline, the database barely grown, no token logged."""
    check_after_fuzz(ingest.collector)
