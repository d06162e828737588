"""Minute rows per node or per rack, each metric's GPU minute means summed with the GPUs behind the sum:
read from the node tier (node_rollup_1m, migration 0019) where it is settled and from raw samples after,
so that a heatmap of 100,000 GPUs at node or rack level, and the racks' power, read 12,500 nodes' rows
rather than every GPU's. A row's mean (sum / GPUs) is what averaging its GPUs' minute means gives
(dashboard/grid.py to_grid, for metrics summed up by their mean); a rack's power is its sum."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import numpy as np
from psycopg import Connection, sql

from gpuscope.collector.query.cells import PG_EPOCH_S, RAW_TO_ROLLED, rollup_splits
from gpuscope.collector.query.rack_power import RackPower
from gpuscope.collector.query.timerange import EPOCH, TimeRange

MINUTE_S = 60
Level = Literal["node", "rack"]


@dataclass(frozen=True)
class GroupRow:
    cluster: str
    rack: str
    node: str | None  # None on rack rows
    gpus: int  # GPUs with a sample in the range: on a node row, the most in any minute; on a rack, its nodes'


@dataclass(frozen=True)
class GroupMinutes:
    level: Level
    rows: list[GroupRow]  # ordered by cluster, rack, node (the order of every chart's rows)
    times: list[datetime]  # the range's minutes
    sums: dict[str, np.ndarray]  # metric -> (rows, times): the GPUs' minute means summed (0 where none)
    gpus: dict[str, np.ndarray]  # metric -> (rows, times): the GPUs behind each sum

    def mean(self, metric: str) -> np.ndarray:
        """The mean over each row's GPUs of their minute means; NaN where no GPU had a value."""
        counts = self.gpus[metric]
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(counts > 0, self.sums[metric] / np.maximum(counts, 1), np.nan)

    def rack_power(self, metric: str = "power_w") -> RackPower:
        """Power per rack and minute (query/rack_power.py's answer at one-minute buckets): its GPUs'
        mean power summed, NaN where none reported power; racks without any power reading left out."""
        racks = [f"{row.cluster}/{row.rack}" for row in self.rows]
        names = sorted(set(racks))
        index = {name: i for i, name in enumerate(names)}
        slot = np.array([index[name] for name in racks], dtype=np.int64)
        watts = np.zeros((len(names), len(self.times)))
        counts = np.zeros((len(names), len(self.times)))
        np.add.at(watts, slot, self.sums[metric])
        np.add.at(counts, slot, self.gpus[metric])
        drew = np.flatnonzero(counts.sum(axis=1) > 0)  # racks that reported no power at all are not on the chart
        watts = np.where(counts > 0, watts, np.nan)[drew]
        return RackPower(MINUTE_S, [names[i] for i in drew.tolist()], self.times, watts)


def answers(metric: str, bucket_s: int) -> bool:
    """Whether this tier answers `metric` at `bucket_s` exactly: one-minute buckets of a rolled metric (a
    wider bucket's GPU mean weighs its minutes by their samples, which the node sums no longer hold)."""
    return bucket_s == MINUTE_S and metric in RAW_TO_ROLLED


def group_minutes(conn: Connection[Any], metrics: Sequence[str], time_range: TimeRange, level: Level) -> GroupMinutes:
    """Every node (or rack) that reported in the range, with each metric's minute sums; one read."""
    for metric in metrics:
        if metric not in RAW_TO_ROLLED:
            raise ValueError(f"{metric!r} has no node tier; one of {sorted(RAW_TO_ROLLED)}")
    times = time_range.buckets(MINUTE_S)
    split = rollup_splits(conn).minute
    params = {
        "origin": EPOCH,
        "minute_lo": times[0],
        "minute_hi": max(split, times[0]),
        "raw_lo": max(split, times[0]),
        "end": time_range.end,
    }
    rows = conn.execute(_statement(metrics, level), params, binary=True).fetchall()
    shape = (len(rows), len(times))
    sums = {metric: np.zeros(shape) for metric in metrics}
    gpus = {metric: np.zeros(shape, dtype=np.int64) for metric in metrics}
    group_rows = []
    first = times[0].timestamp()
    for i, (cluster, rack, node, count, _, stamps, *parts) in enumerate(rows):
        group_rows.append(GroupRow(cluster, rack, node or None, int(count)))
        epoch = np.frombuffer(stamps, ">i8") / 1e6 + PG_EPOCH_S
        column = np.rint((epoch - first) / MINUTE_S).astype(np.int64)
        inside = (column >= 0) & (column < len(times))
        for j, metric in enumerate(metrics):
            sums[metric][i, column[inside]] = np.frombuffer(parts[2 * j], ">f8")[inside]
            gpus[metric][i, column[inside]] = np.frombuffer(parts[2 * j + 1], ">i4")[inside]
    return GroupMinutes(level, group_rows, times, sums, gpus)


def _statement(metrics: Sequence[str], level: Level) -> sql.Composed:
    tier = sql.SQL(", ").join(
        sql.SQL("{} AS s{i}, {} AS n{i}").format(
            sql.Identifier(f"{RAW_TO_ROLLED[m]}_mean_sum"), sql.Identifier(f"{RAW_TO_ROLLED[m]}_gpus"), i=sql.Literal(i)
        )
        for i, m in enumerate(metrics)
    )
    raw_means = sql.SQL(", ").join(
        sql.SQL("avg({})::float8 AS v{i}").format(sql.Identifier(m), i=sql.Literal(i)) for i, m in enumerate(metrics)
    )
    raw_sums = sql.SQL(", ").join(
        sql.SQL("sum(v{i}), count(v{i})::int").format(i=sql.Literal(i)) for i in range(len(metrics))
    )
    summed = sql.SQL(", ").join(
        sql.SQL("sum(s{i}) AS s{i}, sum(n{i})::int AS n{i}").format(i=sql.Literal(i)) for i in range(len(metrics))
    )
    packed = sql.SQL(", ").join(
        sql.SQL(
            "string_agg(float8send(coalesce(c.s{i}, 0)), ''::bytea ORDER BY c.b),"
            " string_agg(int4send(c.n{i}), ''::bytea ORDER BY c.b)"
        ).format(i=sql.Literal(i))
        for i in range(len(metrics))
    )
    node = sql.SQL("name" if level == "node" else "''::text")
    rank = sql.SQL("cluster, rack, name" if level == "node" else "cluster, rack")
    # Rows are numbered in chart order once (a node table's sort), so the minutes group on integers. The
    # tier where it is settled, raw samples after (each GPU's minute mean, then summed per node).
    return sql.SQL(
        "WITH groups AS (SELECT node_id, cluster, rack, {node} AS node, dense_rank() OVER (ORDER BY {rank}) AS k"
        " FROM node), minutes AS ("
        " SELECT node_id, bucket AS b, gpus, {tier} FROM node_rollup_1m"
        "  WHERE bucket >= %(minute_lo)s AND bucket < %(minute_hi)s"
        " UNION ALL"
        " SELECT g.node_id, t.b, count(*)::int, {raw_sums} FROM ("
        "  SELECT gpu_id, date_bin('1 minute', ts, %(origin)s) AS b, {raw_means} FROM gpu_sample"
        "  WHERE ts >= %(raw_lo)s AND ts < %(end)s GROUP BY 1, 2) AS t JOIN gpu g USING (gpu_id) GROUP BY 1, 2"
        "), sizes AS (SELECT r.k, sum(p.gpus)::int AS gpus FROM ("
        "  SELECT node_id, max(gpus) AS gpus FROM minutes GROUP BY 1) AS p JOIN groups r USING (node_id) GROUP BY 1"
        "), cells AS (SELECT r.k, m.b, {summed} FROM minutes m JOIN groups r USING (node_id) GROUP BY 1, 2"
        "), packed AS (SELECT c.k, string_agg(timestamptz_send(c.b), ''::bytea ORDER BY c.b), {packed}"
        "  FROM cells c GROUP BY 1)"
        " SELECT l.cluster, l.rack, l.node, s.gpus, packed.*"
        " FROM (SELECT DISTINCT k, cluster, rack, node FROM groups) l"
        " JOIN sizes s USING (k) JOIN packed USING (k) ORDER BY l.k"
    ).format(tier=tier, raw_sums=raw_sums, raw_means=raw_means, node=node, rank=rank, summed=summed, packed=packed)
