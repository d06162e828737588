"""What a part brings to the collector besides routes and leader tasks (collector/parts.py): figures for
/metrics, read from the database at each scrape (a part whose read fails is left out, the rest still
served), and fields of a job's detail, in the answer and in /openapi.json."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import psycopg
import pytest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from gpuscope.collector.api.auth import TokenAuth
from gpuscope.collector.api.read_jobs import JobDetailField
from gpuscope.collector.main import CollectorConfig, create_app
from gpuscope.collector.parts import Part
from gpuscope.collector.service import BackgroundServer
from tests.alerts.telemetry import add_node


class NoteOut(BaseModel):
    text: str


def broken(conn: psycopg.Connection[Any]) -> list[Metric]:
    conn.execute("SELECT * FROM no_such_table")
    return []


def nodes_known(conn: psycopg.Connection[Any]) -> list[Metric]:
    row = conn.execute("SELECT count(*) FROM node").fetchone()
    assert row is not None
    return [GaugeMetricFamily("gpuscope_test_nodes", "Nodes the collector knows (a test part's figure)", value=row[0])]


def note(conn: psycopg.Connection[Any], job_id: str) -> NoteOut | None:
    row = conn.execute("SELECT count(*) FROM job_allocation WHERE job_id = %s", (job_id,)).fetchone()
    return NoteOut(text=f"{row[0]} allocations") if row and job_id == "noted" else None


@pytest.fixture
def served(dsn: str) -> Iterator[str]:
    parts = (
        Part("broken", metrics=broken),  # first: the next part reads on the same connection after it failed
        Part("fine", metrics=nodes_known, job_fields=(JobDetailField("note", NoteOut, note),)),
    )
    server = BackgroundServer(
        create_app(CollectorConfig(dsn=dsn, auth=TokenAuth(["t" * 24]), parts=parts)), "127.0.0.1", 0
    )
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_a_part_whose_figures_fail_is_left_out_of_metrics(served: str, dsn: str) -> None:
    add_node(dsn, "n1")
    answer = httpx.get(f"{served}/metrics", timeout=10)
    assert answer.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(answer.text)}
    assert [s.value for s in families["gpuscope_test_nodes"].samples] == [1.0], "read at the scrape, from the database"
    assert "gpuscope_collector_database_state" in families, "the collector's own figures are there too"


def test_a_parts_field_is_in_the_job_detail_and_its_description(served: str, dsn: str) -> None:
    gpus = add_node(dsn, "n1", gpus=2)
    start = datetime.now(UTC) - timedelta(hours=1)
    with psycopg.connect(dsn) as conn:
        for job, gpu in zip(("noted", "plain"), gpus, strict=True):
            conn.execute(
                "INSERT INTO job_allocation (job_id, username, node_id, gpu_id, started_at, last_seen)"
                " SELECT %s, 'u', node_id, gpu_id, %s, now() FROM gpu WHERE gpu_id = %s",
                (job, start, gpu),
            )
    noted = httpx.get(f"{served}/api/v1/jobs/noted", timeout=10).json()
    assert list(noted) == ["job", "gpus", "note"], "the part's field after the core's"
    assert noted["note"] == {"text": "1 allocations"} and noted["job"]["job_id"] == "noted"
    assert httpx.get(f"{served}/api/v1/jobs/plain", timeout=10).json()["note"] is None, "nothing on it: null"
    assert httpx.get(f"{served}/api/v1/jobs/none", timeout=10).status_code == 404
    schemas = httpx.get(f"{served}/openapi.json", timeout=10).json()["components"]["schemas"]
    assert list(schemas["JobDetailOut"]["properties"]) == ["job", "gpus", "note"]
    assert "NoteOut" in schemas
