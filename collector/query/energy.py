"""GPU energy over a range, from the boards' energy counters (energy_j: joules since the driver loaded).

What a GPU drew between two of its samples is the counter's increase, across a gap in the samples too
(the board counts while nobody reads it). A drop is a restart (driver reloaded, GPU reset): the new
value is what it drew since. The step that straddles the range's start counts for its share inside the
range. Mean power is the energy over the time the counted steps cover, not over the whole range: a GPU
that reported for half the range is not shown drawing half its power.

One pass over the GPUs' raw samples in the range (the rollups keep no counters): on a node's eight GPUs
a day of one-second samples is ~700,000 rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from psycopg import Connection, sql

from gpuscope.collector.query.timerange import TimeRange

JOULES_PER_KWH = 3.6e6
# The sample before the range's start is looked for this far back; beyond, the first step is lost (a gap).
LOOK_BACK = timedelta(minutes=10)


@dataclass(frozen=True)
class Energy:
    joules: float
    seconds: float  # the time the counted steps cover, at most the range's length
    restarts: int  # drops of the counter in the range (driver reloads, GPU resets)

    @property
    def kwh(self) -> float:
        return self.joules / JOULES_PER_KWH

    @property
    def mean_power_w(self) -> float | None:
        return self.joules / self.seconds if self.seconds > 0 else None


_ENERGY_SQL = (
    "SELECT gpu_id,"
    " sum(CASE WHEN d >= 0 THEN d ELSE e END * least(1.0, inside / dt))::float8,"
    " sum(least(dt, inside))::float8, count(*) FILTER (WHERE d < 0)"
    " FROM (SELECT gpu_id, ts, energy_j AS e, energy_j - lag(energy_j) OVER w AS d,"
    "   extract(epoch FROM ts - lag(ts) OVER w)::float8 AS dt, extract(epoch FROM ts - %(start)s)::float8 AS inside"
    "   FROM gpu_sample WHERE ts >= %(look_back)s AND ts < %(end)s AND energy_j IS NOT NULL{only}"
    "   WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)) AS steps"
    " WHERE ts >= %(start)s AND dt > 0 GROUP BY gpu_id"
)


def energy(conn: Connection[Any], time_range: TimeRange, gpu_ids: Sequence[int] | None = None) -> dict[int, Energy]:
    """GPU id -> its energy in the range; `gpu_ids` None: every GPU that reported. A GPU with fewer
    than two samples of its counter in reach is left out (nothing to subtract)."""
    only = sql.SQL(" AND gpu_id = ANY(%(gpus)s)" if gpu_ids is not None else "")
    rows = conn.execute(
        sql.SQL(_ENERGY_SQL).format(only=only),
        {
            "start": time_range.start,
            "end": time_range.end,
            "look_back": time_range.start - LOOK_BACK,
            "gpus": list(gpu_ids or []),
        },
    ).fetchall()
    return {gpu_id: Energy(joules, seconds, restarts) for gpu_id, joules, seconds, restarts in rows}


def energy_kwh(conn: Connection[Any], time_range: TimeRange, gpu_ids: Sequence[int] | None = None) -> dict[int, float]:
    """GPU id -> kWh drawn in the range (the overview sums it for the fleet)."""
    return {gpu_id: used.kwh for gpu_id, used in energy(conn, time_range, gpu_ids).items()}
