"""POST /api/v1/samples against a real collector and database: auth, validation, atomicity, retries."""

from __future__ import annotations

import copy
import gzip
import json
import time
import uuid
from dataclasses import replace
from typing import Any

import httpx
import pytest

from gpuscope.exporter.events import Event
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot
from gpuscope.exporter.wire import Origin, encode_batch
from tests.collector.helpers import NOTHING, post, stored
from tests.conftest import count_rows
from tests.processes import RunningCollector, running_collector


def make_batch(seconds: int = 5, seq: int = 1, exporter_id: str | None = None) -> dict[str, Any]:
    """A valid batch, built by the exporter's own encoder from simulated readings of the last seconds."""
    topology = build_topology(1, 8, 1, cluster="test")
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    now = time.time()
    snapshots = []
    for i in range(seconds):
        gpus, ports = source.read(now - seconds + i)
        snapshots.append(Snapshot(ts=now - seconds + i, gpus=gpus, ports=ports))
    origin = Origin("test", "rack-00", "node-000", "sim", exporter_id or str(uuid.uuid4()))
    return encode_batch(origin, seq, snapshots, [Event(now - 1, 3, "xid", code=79)])


def test_valid_batch_is_stored_whole(collector: RunningCollector) -> None:
    response = post(collector, make_batch(seconds=5))
    assert response.status_code == 200, response.text
    assert response.json() == {"duplicate": False, "gpu_rows": 40, "port_rows": 40, "mig_rows": 0, "ignored_fields": []}
    assert stored(collector) == {
        "node": 1,
        "gpu": 8,
        "ib_port": 8,
        "ingest_batch": 1,
        "gpu_sample": 40,
        "ib_port_sample": 40,
        "event": 1,
    }


def test_gzip_body_is_accepted(collector: RunningCollector) -> None:
    body = gzip.compress(json.dumps(make_batch()).encode())
    assert post(collector, body, **{"Content-Encoding": "gzip"}).status_code == 200


@pytest.mark.parametrize("token", [None, "wrong-token-of-some-length", "x"])
def test_missing_or_wrong_token_gets_401_and_writes_nothing(collector: RunningCollector, token: str | None) -> None:
    response = post(collector, make_batch(), token=token)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert stored(collector) == NOTHING


def test_token_in_another_scheme_is_refused(collector: RunningCollector) -> None:
    response = post(collector, make_batch(), token=None, Authorization=f"Basic {collector.token}")
    assert response.status_code == 401


def test_retried_batch_is_stored_once(collector: RunningCollector) -> None:
    batch = make_batch(seq=7)
    first, again = post(collector, batch), post(collector, batch)
    assert first.json()["duplicate"] is False
    assert again.status_code == 200 and again.json()["duplicate"] is True
    assert count_rows(collector.dsn, "gpu_sample") == 40
    assert count_rows(collector.dsn, "event") == 1


def test_same_seq_from_another_exporter_is_not_a_duplicate(collector: RunningCollector) -> None:
    assert post(collector, make_batch(seq=1)).json()["duplicate"] is False
    assert post(collector, make_batch(seq=1)).json()["duplicate"] is False
    assert count_rows(collector.dsn, "ingest_batch") == 2


def corrupt(path: list[Any], value: Any) -> dict[str, Any]:
    batch = make_batch()
    target = batch
    for key in path[:-1]:
        target = target[key]
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return batch


DELETE = object()
IN_AN_HOUR = object()  # a time an hour from now, taken when the test runs (not in its id: parallel runs agree)
LAST_ROW = 39


@pytest.mark.parametrize(
    ("path", "value", "expected_loc", "expected_msg"),
    [
        (["version"], 99, ["version"], "unsupported version"),
        (["seq"], "7", ["seq"], "integer"),
        (["exporter_id"], "not-a-uuid", ["exporter_id"], "UUID"),
        (["source", "node"], DELETE, ["source", "node"], "required"),
        (["source", "node"], "", ["source", "node"], "printable"),
        (
            ["gpu_samples", "values", "temp_c", LAST_ROW],
            1e6,
            ["gpu_samples", "values", "temp_c", LAST_ROW],
            "out of range",
        ),
        (
            ["gpu_samples", "values", "power_w", LAST_ROW],
            -5,
            ["gpu_samples", "values", "power_w", LAST_ROW],
            "out of range",
        ),
        (["gpu_samples", "values", "util_pct", 3], "high", ["gpu_samples", "values", "util_pct", 3], "number"),
        (["gpu_samples", "values", "util_pct", 3], True, ["gpu_samples", "values", "util_pct", 3], "number"),
        (["gpu_samples", "ts", LAST_ROW], IN_AN_HOUR, ["gpu_samples", "ts", LAST_ROW], "future"),
        (["gpu_samples", "ts", 0], None, ["gpu_samples", "ts", 0], "number"),
        (["gpu_samples", "gpu", LAST_ROW], 9, ["gpu_samples", "gpu", LAST_ROW], "not a gpu listed"),
        (["gpu_samples", "up"], [True], ["gpu_samples", "up"], "booleans"),
        (["port_samples", "values", "xmit_bytes", 0], -1, ["port_samples", "values", "xmit_bytes", 0], "out of range"),
        (["gpus", 0, "uuid"], 12, ["gpus", 0, "uuid"], "string"),
        (["events"], {}, ["events"], "array"),
        (["events", 0, "ts"], IN_AN_HOUR, ["events", 0, "ts"], "future"),
        (["events", 0, "ts"], "now", ["events", 0, "ts"], "number"),
        (["events", 0, "gpu"], 8, ["events", 0, "gpu"], "listed in gpus"),
        (["events", 0, "kind"], "xid; drop", ["events", 0, "kind"], "underscores"),
        (["events", 0, "kind"], DELETE, ["events", 0, "kind"], "required"),
        (["events", 0, "code"], -1, ["events", 0, "code"], "between 0"),
        (["events", 0, "count"], 0, ["events", 0, "count"], "between 1"),
        (["events", 0, "message"], "x" * 2000, ["events", 0, "message"], "1 to 1024"),
    ],
)
def test_bad_field_gets_422_naming_it_and_nothing_is_written(
    collector: RunningCollector, path: list[Any], value: Any, expected_loc: list[Any], expected_msg: str
) -> None:
    response = post(collector, corrupt(path, time.time() + 3600 if value is IN_AN_HOUR else value))
    assert response.status_code == 422, response.text
    [problem] = response.json()["detail"]
    assert problem["loc"] == expected_loc
    assert expected_msg in problem["msg"]
    assert stored(collector) == NOTHING


def test_short_column_is_rejected(collector: RunningCollector) -> None:
    batch = make_batch()
    batch["gpu_samples"]["values"]["power_w"].pop()
    response = post(collector, batch)
    assert response.status_code == 422
    assert "expected 40" in response.json()["detail"][0]["msg"]
    assert stored(collector) == NOTHING


def test_duplicate_rows_inside_a_batch_are_rejected(collector: RunningCollector) -> None:
    batch = make_batch()
    samples = batch["gpu_samples"]
    samples["ts"][1] = samples["ts"][0]
    samples["gpu"][1] = samples["gpu"][0]
    response = post(collector, batch)
    assert response.status_code == 422 and "duplicate" in response.json()["detail"][0]["msg"]


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        (b"{not json", 400, "invalid JSON"),
        (b'{"x": NaN}', 400, "NaN and Infinity are not allowed"),
        (b"[1, 2]", 422, "JSON object"),
        (b"\xff\xfe", 400, "UTF-8"),
    ],
)
def test_malformed_body_gets_4xx_with_a_message(
    collector: RunningCollector, body: bytes, status: int, needle: str
) -> None:
    response = post(collector, body)
    assert response.status_code == status
    assert needle in json.dumps(response.json())
    assert stored(collector) == NOTHING


def test_nan_in_values_is_rejected(collector: RunningCollector) -> None:
    text = json.dumps(make_batch())
    text = text.replace('"power_w": [', '"power_w": [NaN, ', 1)
    response = post(collector, text.encode())
    assert response.status_code == 400 and "NaN" in response.text


def test_oversized_body_gets_413(collector: RunningCollector) -> None:
    response = post(collector, b" " * (33 * 2**20))
    assert response.status_code == 413


def test_gzip_bomb_gets_413(collector: RunningCollector) -> None:
    bomb = gzip.compress(b" " * (300 * 2**20))
    response = post(collector, bomb, **{"Content-Encoding": "gzip"})
    assert response.status_code == 413


def test_unknown_metric_is_ignored_and_reported(collector: RunningCollector) -> None:
    """A newer exporter's extra metric must not cost the batch: stored, and the key is named."""
    batch = make_batch()
    batch["gpu_samples"]["values"]["quantum_flux"] = [1.0] * 40
    response = post(collector, batch)
    assert response.status_code == 200
    assert response.json()["ignored_fields"] == ["quantum_flux"]


def test_absent_values_are_stored_as_null(collector: RunningCollector) -> None:
    batch = make_batch(seconds=1)
    batch["gpu_samples"]["values"]["mem_temp_c"] = [None] * 8
    del batch["gpu_samples"]["values"]["ecc_corrected"]
    assert post(collector, batch).status_code == 200
    import psycopg

    with psycopg.connect(collector.dsn) as conn:
        row = conn.execute("SELECT count(mem_temp_c), count(ecc_corrected), count(temp_c) FROM gpu_sample").fetchone()
    assert row == (0, 0, 8)


def test_collector_health_and_own_metrics(collector: RunningCollector) -> None:
    assert httpx.get(f"{collector.url}/healthz").json() == {"status": "ok"}
    post(collector, make_batch())
    post(collector, make_batch(), token=None)
    text = httpx.get(f"{collector.url}/metrics").text
    assert 'gpuscope_collector_batches_total{result="stored"} 1.0' in text
    assert 'gpuscope_collector_batches_total{result="unauthorized"} 1.0' in text
    assert 'gpuscope_collector_rows_total{kind="gpu"} 40.0' in text


def test_openapi_documents_the_ingest_route(collector: RunningCollector) -> None:
    spec = httpx.get(f"{collector.url}/openapi.json").json()
    assert "/api/v1/samples" in spec["paths"]
    assert "422" in spec["paths"]["/api/v1/samples"]["post"]["responses"]
    assert copy.deepcopy(spec)  # well-formed JSON object


def test_failure_mid_batch_rolls_back_everything(collector: RunningCollector) -> None:
    """The database refuses the port rows, written last: the GPU rows and inventory must go too."""
    import psycopg

    with psycopg.connect(collector.dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'disk on fire'; END $$"
        )
        conn.execute("CREATE TRIGGER refuse BEFORE INSERT ON ib_port_sample FOR EACH ROW EXECUTE FUNCTION refuse()")
    batch = make_batch()
    response = post(collector, batch)
    assert response.status_code == 500
    assert "nothing was stored" in response.json()["detail"]
    assert stored(collector) == NOTHING
    with psycopg.connect(collector.dsn, autocommit=True) as conn:
        conn.execute("DROP TRIGGER refuse ON ib_port_sample")
    assert post(collector, batch).json()["duplicate"] is False, "the retry is stored, not taken for a duplicate"
    assert count_rows(collector.dsn, "gpu_sample") == 40


def test_every_catalog_metric_has_a_column() -> None:
    """The exporter's catalog and the collector's columns are kept apart on purpose; this keeps them in step."""
    from gpuscope.collector.store.columns import GPU_COLUMNS, PORT_COLUMNS
    from gpuscope.exporter.catalog import keys_for

    assert set(keys_for("gpu")) == {c.key for c in GPU_COLUMNS}
    assert set(keys_for("ib")) == {c.key for c in PORT_COLUMNS}


def test_nvml_batch_with_every_metric_is_stored(collector: RunningCollector) -> None:
    from gpuscope.exporter.sources.nvml import NvmlSource
    from gpuscope.exporter.testing.fake_nvml import h100_node, make_fake_pynvml

    source = NvmlSource(make_fake_pynvml(h100_node(2)), xid_events=False)
    now = time.time()
    snaps = [Snapshot(ts=now - 2 + i, gpus=source.read(now - 2 + i)[0], ports=()) for i in range(2)]
    batch = encode_batch(Origin("test", "r", "n", "nvml", str(uuid.uuid4())), 1, snaps)
    response = post(collector, batch)
    assert response.status_code == 200 and response.json()["ignored_fields"] == []
    import psycopg

    with psycopg.connect(collector.dsn) as conn:
        row = conn.execute(
            "SELECT count(nvlink_tx_bytes), max(remap_failure), max(throttle_power_s) FROM gpu_sample"
        ).fetchone()
    assert row == (4, 0, 0.0)


def test_per_node_token_is_valid_for_its_node_only(dsn: str) -> None:
    shared, mine = "shared-token-0123456789", "node-000-token-0123456789"
    with running_collector(dsn, token=shared, node_tokens={"test/node-000": mine}) as collector:
        running = replace(collector, token=mine)
        assert post(running, make_batch(seq=1)).status_code == 200  # make_batch reports node-000
        other = make_batch(seq=2)
        other["source"]["node"] = "node-001"
        refused = post(running, other)
        assert refused.status_code == 403 and refused.json()["detail"][0]["loc"] == ["source", "node"]
        assert post(running, other, token=shared).status_code == 200
    assert count_rows(dsn, "ingest_batch") == 2


def test_read_api_can_require_a_token(dsn: str) -> None:
    reader = "read-token-0123456789abc"
    with running_collector(dsn, read_token=reader) as collector:
        url = f"{collector.url}/api/v1/rack-power"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer wrong-wrong-wrong-wrong"}).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {reader}"}).status_code == 200
        assert httpx.get(f"{collector.url}/healthz").status_code == 200, "health stays open"


def test_node_tokens_file_rules(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gpuscope.collector.api.auth import read_node_tokens
    from gpuscope.core.tokens import TokenError

    good = tmp_path / "tokens"
    good.write_text("# cluster/node token\nc/node-1 aaaaaaaaaaaaaaaaaaaa\n\nc/node-2 bbbbbbbbbbbbbbbbbbbb\n")
    assert read_node_tokens(good) == {("c", "node-1"): "a" * 20, ("c", "node-2"): "b" * 20}
    for text, message in (
        ("c/node-1\n", "expected 'CLUSTER/NODE TOKEN'"),
        ("c/n t1111111111111111\nc/n t2222222222222222\n", "twice"),
        ("# nothing\n", "no node tokens"),
    ):
        bad = tmp_path / "bad"
        bad.write_text(text)
        with pytest.raises(TokenError, match=message):
            read_node_tokens(bad)
