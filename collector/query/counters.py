"""Counters and states of a range, per device, in one pass over its samples: what went wrong and since when.

A counter (ECC errors, link-downs) is read as its increase in the range, its newest value and when it
rose; a drop is a restart (driver reload, GPU reset, counters cleared), from which the new value is
the increase. A state (a row remap pending, a port's link state) is read as its newest value, when it
last changed, and how often it left its good value. The sample before the range's start is read too,
so a change at the first sample in the range counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import Connection, sql

from gpuscope.collector.query.timerange import TimeRange

LOOK_BACK = timedelta(minutes=10)


@dataclass(frozen=True)
class CounterUse:
    increase: float | None  # in the range; None: not reported
    latest: float | None  # the newest value (since the driver loaded, or the counters were cleared)
    first_rise: datetime | None  # the first and last samples in the range that saw it rise
    last_rise: datetime | None


@dataclass(frozen=True)
class StateUse:
    latest: float | None  # the newest value; None: not reported
    changed_at: datetime | None  # when it last changed in the range; None: the same all along
    departures: int  # times it left its good value in the range
    last_departure: datetime | None


@dataclass(frozen=True)
class Summary:
    last_seen: datetime  # the device's newest sample in reach (before the range's start: silent in it)
    counters: dict[str, CounterUse]
    states: dict[str, StateUse]


def summarise(
    conn: Connection[Any],
    table: str,
    key: str,
    ids: Sequence[int],
    counters: Sequence[str],
    states: Mapping[str, float | None],
    time_range: TimeRange,
    only_rows: sql.Composable | None = None,
) -> dict[int, Summary]:
    """Device id (`key` in `table`) -> its summary. `states`: column -> its good value (None: none, only
    changes count). `only_rows`: a condition on the rows read (a GPU's rows while it answered). Table and
    column names are the caller's constants, passed as identifiers."""
    k = sql.Identifier(key)
    inner: list[sql.Composable] = [k, sql.SQL("ts"), sql.SQL("lead(ts) OVER w IS NULL AS newest")]
    outer: list[sql.Composable] = [k, sql.SQL("max(ts)")]
    in_range = sql.SQL("ts >= %(start)s")
    for i, column in enumerate(counters):
        c, v, d = sql.Identifier(column), sql.Identifier(f"c{i}"), sql.Identifier(f"c{i}_d")
        inner += [
            sql.SQL("{c}::float8 AS {v}").format(c=c, v=v),
            sql.SQL("{c}::float8 - lag({c}::float8) OVER w AS {d}").format(c=c, d=d),
        ]
        rose = sql.SQL("{r} AND ({d} > 0 OR ({d} < 0 AND {v} > 0))").format(r=in_range, d=d, v=v)
        outer += [
            sql.SQL("sum(CASE WHEN {d} >= 0 THEN {d} WHEN {d} < 0 THEN {v} END) FILTER (WHERE {r})").format(
                d=d, v=v, r=in_range
            ),
            sql.SQL("max({v}) FILTER (WHERE newest)").format(v=v),
            sql.SQL("min(ts) FILTER (WHERE {rose})").format(rose=rose),
            sql.SQL("max(ts) FILTER (WHERE {rose})").format(rose=rose),
        ]
    params: dict[str, Any] = {}
    for i, (column, good) in enumerate(states.items()):
        c, v, p = sql.Identifier(column), sql.Identifier(f"s{i}"), sql.Identifier(f"s{i}_p")
        params[f"good{i}"] = good
        inner += [
            sql.SQL("{c}::float8 AS {v}").format(c=c, v=v),
            sql.SQL("lag({c}::float8) OVER w AS {p}").format(c=c, p=p),
        ]
        left = sql.SQL("{r} AND {p} = {g} AND {v} <> {g}").format(r=in_range, p=p, v=v, g=sql.Placeholder(f"good{i}"))
        outer += [
            sql.SQL("max({v}) FILTER (WHERE newest)").format(v=v),
            sql.SQL("max(ts) FILTER (WHERE {r} AND {v} <> {p})").format(r=in_range, v=v, p=p),
            sql.SQL("count(*) FILTER (WHERE {left})").format(left=left),
            sql.SQL("max(ts) FILTER (WHERE {left})").format(left=left),
        ]
    statement = sql.SQL(
        "SELECT {outer} FROM (SELECT {inner} FROM {table}"
        " WHERE {k} = ANY(%(ids)s) AND ts >= %(look_back)s AND ts < %(end)s{only}"
        " WINDOW w AS (PARTITION BY {k} ORDER BY ts)) AS steps GROUP BY {k}"
    ).format(
        outer=sql.SQL(", ").join(outer),
        inner=sql.SQL(", ").join(inner),
        table=sql.Identifier(table),
        k=k,
        only=sql.SQL(" AND ({})").format(only_rows) if only_rows is not None else sql.SQL(""),
    )
    params |= {
        "ids": list(ids),
        "start": time_range.start,
        "end": time_range.end,
        "look_back": time_range.start - LOOK_BACK,
    }
    summaries = {}
    for row in conn.execute(statement, params).fetchall():
        values = iter(row[2:])
        found = {column: CounterUse(*(next(values) for _ in range(4))) for column in counters}
        held = {column: StateUse(*(next(values) for _ in range(4))) for column in states}
        summaries[row[0]] = Summary(row[1], found, held)
    return summaries
