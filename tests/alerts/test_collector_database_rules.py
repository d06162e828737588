"""The shipped CollectorDatabaseDisk* rules: the evaluating collector's view of its database (alerts/facts.py)
reaches the SQL rules through the view alerting.collector_database, on a real database."""

from __future__ import annotations

import dataclasses
import datetime as dt
import errno
from pathlib import Path

import psycopg

from gpuscope.alerts import views
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.facts import database_facts
from gpuscope.alerts.rules import default_rules_text, parse_rules
from gpuscope.collector.store.availability import DatabaseStatus
from tests.alerts.telemetry import cycle


class _Disk(DatabaseStatus):
    """A data directory whose free space the test sets (the machine's own disk is not ours to fill)."""

    def __init__(self, free: int) -> None:
        super().__init__(data_dir=Path("/nonexistent"))
        self.free = free

    def free_bytes(self) -> int | None:
        return self.free


def engine_for(status: DatabaseStatus) -> AlertEngine:
    groups = [
        dataclasses.replace(g, rules=tuple(r for r in g.rules if r.alert.startswith("CollectorDatabase")))
        for g in parse_rules(default_rules_text())
    ]
    return AlertEngine([g for g in groups if g.rules], None, facts=lambda: database_facts(status))


def test_a_full_disk_fires_at_once_and_low_space_after_five_minutes(dsn: str) -> None:
    views.apply(dsn)
    disk = _Disk(free=512 * 2**20)
    engine = engine_for(disk)
    now = dt.datetime.now(dt.UTC)
    cycle(dsn, engine, now)
    assert {(a.alertname, a.state) for a in engine.instances.values()} == {("CollectorDatabaseDiskLow", "pending")}

    disk.free = 0
    disk.failed(psycopg.errors.DiskFull(f"could not extend file: {errno.errorcode[errno.ENOSPC]}"))
    cycle(dsn, engine, now + dt.timedelta(minutes=6))
    states = {(a.alertname, a.state, a.value) for a in engine.instances.values()}
    assert states == {("CollectorDatabaseDiskFull", "firing", 0.0), ("CollectorDatabaseDiskLow", "firing", 0.0)}


def test_nothing_fires_for_a_healthy_database_or_where_nothing_was_set(dsn: str) -> None:
    views.apply(dsn)
    engine = engine_for(_Disk(free=50 * 2**30))
    cycle(dsn, engine, dt.datetime.now(dt.UTC))
    assert engine.instances == {}
    with psycopg.connect(dsn) as conn:  # another session (the dashboard, psql): the view has no row
        assert conn.execute("SELECT count(*) FROM alerting.collector_database").fetchone() == (0,)
