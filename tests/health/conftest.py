"""The health tests' fleet: four nodes in a fresh database, and the Kubernetes stand-in holding the same
nodes for live runs (tests/health/fleet.py)."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from tests.health.api_server import api_server, node
from tests.health.fleet import NAMES, Fleet
from tests.health.helpers import Telemetry


@pytest.fixture
def fleet(dsn: str) -> Iterator[Fleet]:
    with psycopg.connect(dsn, autocommit=True) as conn, api_server([node(name) for name in NAMES]) as server:
        yield Fleet(dsn, Telemetry(conn), server)
