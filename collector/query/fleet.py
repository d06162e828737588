"""Fleet summary: how many GPUs report, their mean utilisation and total power, from the latest samples;
how many jobs run."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from psycopg import Connection

FRESH_WITHIN = timedelta(minutes=2)


@dataclass(frozen=True)
class FleetSummary:
    gpus_known: int  # every GPU in the inventory
    gpus_reporting: int  # sampled within FRESH_WITHIN
    gpus_up: int
    mean_util_pct: float | None
    total_power_w: float | None
    running_jobs: int = 0
    nodes_known: int = 0


def fleet_summary(conn: Connection[Any]) -> FleetSummary:
    row = conn.execute(
        "SELECT (SELECT count(*) FROM gpu), count(*), count(*) FILTER (WHERE up),"
        "       avg(util_pct)::float8, sum(power_w)::float8,"
        "       (SELECT count(DISTINCT job_id) FROM job_allocation WHERE ended_at IS NULL),"
        "       (SELECT count(*) FROM node)"
        " FROM (SELECT DISTINCT ON (gpu_id) up, util_pct, power_w FROM gpu_sample"
        "       WHERE ts > now() - %s ORDER BY gpu_id, ts DESC) AS latest",
        (FRESH_WITHIN,),
    ).fetchone()
    assert row is not None
    return FleetSummary(*row)
