"""Usage accounting: per allocation, what its GPUs did while the job held them, and the hourly table
(usage_1h) the reports read.

Per minute of an allocation (from the minute rollups), weighted by the seconds of that minute the job
held the GPU:
- active: SM activity (the share of SMs busy) where the GPU reports it, utilisation (the share of time any
  kernel ran, which overstates work) where it does not; active_sm_s says how much of each;
- tensor: tensor-core activity, where reported;
- idle: utilisation (SM activity where there is none) under IDLE_BELOW_PCT, in a run of at least
  IDLE_STRETCH minutes of the same allocation: a pause for a checkpoint is not waste, half an hour is;
- energy: the growth of the board's energy counter (gpu_energy_1m, the first and last reading of each
  minute), a drop being a restart whose new value is what was drawn since; where a minute has no counter
  reading, its mean power times its seconds. A MIG device gets its share of the board's energy; its
  activity is its GPU instance's, which the minute rollups do not keep, so MIG time counts as held but
  not measured.

usage_1h holds one row per hour, job and GPU model. An hour is computed while it runs (every REFRESH),
again once its idle runs and late minutes have settled, and a last time FINAL_AFTER its end, which picks
up an exporter's spool replayed within that time.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg import AsyncConnection

log = logging.getLogger(__name__)

IDLE_BELOW_PCT = 5.0  # the GpuIdleInJob rule's threshold
IDLE_STRETCH = timedelta(minutes=30)  # an idle run shorter than this is a pause, not waste
LOOK_BACK = timedelta(minutes=10)  # the counter reading before a minute is looked for this far back
MAX_BOARD_W = 4000.0  # no board draws more: a counter step above this is a bad reading, not energy
REFRESH = timedelta(minutes=5)
SETTLED = IDLE_STRETCH + timedelta(minutes=4)  # after the hour's end: its idle runs and minutes are known
FINAL_AFTER = timedelta(hours=6)
PASS_SECONDS = 20.0  # one maintenance pass computes hours for at most this long
USAGE_LOCK_KEY = 0x75736167  # 'usag': one collector replica computes usage at a time

# The allocations overlapping [lo, hi) (one job's, or all), with their GPU's model and share: a MIG
# device holds slices/gpu_slices of its board. An open allocation runs to `now`.
_ALLOC = (
    "alloc AS (SELECT a.allocation_id, a.job_id, a.username, a.account, a.partition, a.namespace, a.gpu_id,"
    "   a.mig_id, a.node_id, g.model, coalesce(d.slices::float8 / d.gpu_slices, 1) AS share,"
    "   a.started_at AS a_lo, coalesce(a.ended_at, greatest(%(now)s, a.started_at)) AS a_hi"
    "   FROM job_allocation a JOIN gpu g USING (gpu_id) LEFT JOIN mig_device d USING (mig_id)"
    "   WHERE a.started_at < %(hi)s AND (a.ended_at IS NULL OR a.ended_at > %(lo)s)"
    "   AND (%(job)s::text IS NULL OR a.job_id = %(job)s))"
)
# Each allocation's minutes from IDLE_STRETCH before the range to IDLE_STRETCH after it (so a run that
# crosses the range's edges has its true length), with w: the seconds of the minute inside both the
# allocation and the range. busy decides idleness: utilisation first, as the GpuIdleInJob rule reads it.
_MINUTE = (
    "minute AS (SELECT a.allocation_id, r.gpu_id, r.bucket,"
    "   greatest(0, extract(epoch FROM least(r.bucket + interval '1 minute', a.a_hi, %(hi)s)"
    "     - greatest(r.bucket, a.a_lo, %(lo)s)))::float8 AS w,"
    "   CASE WHEN a.mig_id IS NULL AND r.util_n > 0 THEN r.util_sum / r.util_n END AS util,"
    "   CASE WHEN a.mig_id IS NULL AND r.sm_active_n > 0 THEN r.sm_active_sum / r.sm_active_n END AS sm,"
    "   CASE WHEN a.mig_id IS NULL AND r.tensor_n > 0 THEN r.tensor_sum / r.tensor_n END AS tensor,"
    "   CASE WHEN r.power_n > 0 THEN r.power_sum / r.power_n END AS power"
    "   FROM alloc a JOIN gpu_rollup_1m r ON r.gpu_id = a.gpu_id"
    "   AND r.bucket > greatest(a.a_lo, %(lo)s - %(stretch)s) - interval '1 minute'"
    "   AND r.bucket < least(a.a_hi, %(hi)s + %(stretch)s))"
)
# Idle runs: consecutive idle minutes of one allocation share a run number.
_RUNS = (
    "marked AS (SELECT *, coalesce(util, sm) < %(idle)s AS idle,"
    "   lag(coalesce(util, sm) < %(idle)s) OVER w AS prev_idle, lag(bucket) OVER w AS prev_bucket"
    "   FROM minute WINDOW w AS (PARTITION BY allocation_id ORDER BY bucket)),"
    " runs AS (SELECT *, sum(CASE WHEN idle AND prev_idle AND bucket = prev_bucket + interval '1 minute'"
    "   THEN 0 ELSE 1 END) OVER (PARTITION BY allocation_id ORDER BY bucket) AS run FROM marked),"
    " run_len AS (SELECT *, count(*) FILTER (WHERE idle) OVER (PARTITION BY allocation_id, run) AS run_minutes"
    "   FROM runs)"
)
# Energy per GPU-minute from the counter: the growth inside the minute plus the step from the last reading
# before it (within LOOK_BACK), a drop counting the new value; a step faster than MAX_BOARD_W is dropped.
_ENERGY = (
    "counter AS (SELECT gpu_id, bucket, first_j, last_j, lag(last_j) OVER w AS prev_j, lag(bucket) OVER w AS prev_at"
    "   FROM gpu_energy_1m WHERE gpu_id IN (SELECT gpu_id FROM alloc)"
    "   AND bucket >= %(lo)s - %(look_back)s - interval '1 minute' AND bucket < %(hi)s"
    "   WINDOW w AS (PARTITION BY gpu_id ORDER BY bucket)),"
    " steps AS (SELECT gpu_id, bucket, prev_at >= bucket - %(look_back)s AS joined,"
    "   CASE WHEN last_j >= first_j THEN last_j - first_j ELSE last_j END"
    "   + CASE WHEN prev_at >= bucket - %(look_back)s"
    "     THEN CASE WHEN first_j >= prev_j THEN first_j - prev_j ELSE first_j END ELSE 0 END AS joules,"
    "   extract(epoch FROM bucket + interval '1 minute'"
    "     - CASE WHEN prev_at >= bucket - %(look_back)s THEN prev_at + interval '1 minute' ELSE bucket END)::float8"
    "     AS span FROM counter),"
    " energy AS (SELECT gpu_id, bucket, joules FROM steps WHERE joules <= %(max_w)s * span)"
)
# Per allocation: the figures over [lo, hi), before its share is applied.
_PER_ALLOCATION = (
    "per_allocation AS (SELECT m.allocation_id,"
    "   coalesce(sum(w) FILTER (WHERE coalesce(util, sm) IS NOT NULL), 0) AS measured_s,"
    "   coalesce(sum(w * coalesce(sm, util) / 100), 0) AS active_s,"
    "   coalesce(sum(w) FILTER (WHERE sm IS NOT NULL), 0) AS active_sm_s,"
    "   coalesce(sum(w * tensor / 100), 0) AS tensor_s,"
    "   coalesce(sum(w) FILTER (WHERE tensor IS NOT NULL), 0) AS tensor_measured_s,"
    "   coalesce(sum(w) FILTER (WHERE idle AND run_minutes >= %(stretch_minutes)s), 0) AS idle_s,"
    "   coalesce(sum(w / 60 * coalesce(e.joules, power * 60)), 0) AS energy_j,"
    "   coalesce(sum(w) FILTER (WHERE e.joules IS NOT NULL), 0) AS energy_counter_s,"
    "   sum(w * util) / nullif(sum(w) FILTER (WHERE util IS NOT NULL), 0) AS util_mean,"
    "   sum(w * sm) / nullif(sum(w) FILTER (WHERE sm IS NOT NULL), 0) AS sm_mean,"
    "   sum(w * tensor) / nullif(sum(w) FILTER (WHERE tensor IS NOT NULL), 0) AS tensor_mean,"
    "   sum(w * power) / nullif(sum(w) FILTER (WHERE power IS NOT NULL), 0) AS power_mean"
    "   FROM run_len m LEFT JOIN energy e ON e.gpu_id = m.gpu_id AND e.bucket = m.bucket"
    "   WHERE m.w > 0 GROUP BY m.allocation_id)"
)
# The seconds each allocation held its GPU inside [lo, hi).
_HELD = "greatest(0, extract(epoch FROM least(a.a_hi, %(hi)s) - greatest(a.a_lo, %(lo)s)))::float8"

USAGE_CTES = "WITH " + ", ".join((_ALLOC, _MINUTE, _RUNS, _ENERGY, _PER_ALLOCATION))

# usage_1h's columns, in the order HOUR_ROWS gives them.
USAGE_COLUMNS = (
    "bucket", "job_id", "model", "username", "account", "partition", "namespace", "gpus", "allocated_s", "measured_s",
    "active_s", "active_sm_s", "tensor_s", "tensor_measured_s", "idle_s", "energy_j", "energy_counter_s",
)  # fmt: skip
# One row per job and model (and the job's user, account, partition, namespace) over [lo, hi), as usage_1h
# keeps them: the hour's rows, or a part of an hour that a usage report computes afresh (collector/query).
_HOUR_SELECT = (
    " SELECT %(lo)s, a.job_id, a.model, a.username, a.account, a.partition, a.namespace,"  # noqa: S608 (constants)
    "   sum(a.share * " + _HELD + ") / 3600, sum(a.share * " + _HELD + "),"
    "   coalesce(sum(a.share * u.measured_s), 0), coalesce(sum(a.share * u.active_s), 0),"
    "   coalesce(sum(a.share * u.active_sm_s), 0), coalesce(sum(a.share * u.tensor_s), 0),"
    "   coalesce(sum(a.share * u.tensor_measured_s), 0), coalesce(sum(a.share * u.idle_s), 0),"
    "   coalesce(sum(a.share * u.energy_j), 0), coalesce(sum(a.share * u.energy_counter_s), 0)"
    " FROM alloc a LEFT JOIN per_allocation u USING (allocation_id)"
    " GROUP BY a.job_id, a.model, a.username, a.account, a.partition, a.namespace"
)
HOUR_ROWS = USAGE_CTES + _HOUR_SELECT
HOUR_INSERT = USAGE_CTES + f" INSERT INTO usage_1h ({', '.join(USAGE_COLUMNS)})" + _HOUR_SELECT
# One job's allocations over its whole life, each with its node and GPU: the jobstats report.
PER_GPU_SELECT = (
    USAGE_CTES  # noqa: S608 (constants only)
    + " SELECT a.allocation_id, n.name, gi.gpu_index, a.gpu_id, md.profile, a.model, a.username, a.account,"
    "   a.partition, a.namespace, a.a_lo, a.a_hi, a.share, a.share * " + _HELD + ","
    "   a.share * coalesce(u.measured_s, 0), a.share * coalesce(u.active_s, 0), a.share * coalesce(u.active_sm_s, 0),"
    "   a.share * coalesce(u.tensor_s, 0), a.share * coalesce(u.tensor_measured_s, 0), a.share * coalesce(u.idle_s, 0),"
    "   a.share * coalesce(u.energy_j, 0), a.share * coalesce(u.energy_counter_s, 0),"
    "   u.util_mean, u.sm_mean, u.tensor_mean, u.power_mean"
    " FROM alloc a LEFT JOIN per_allocation u USING (allocation_id) JOIN node n ON n.node_id = a.node_id"
    " JOIN gpu gi ON gi.gpu_id = a.gpu_id LEFT JOIN mig_device md ON md.mig_id = a.mig_id"
    " ORDER BY n.name, gi.gpu_index, a.a_lo"
)


def usage_params(lo: datetime, hi: datetime, now: datetime, job: str | None = None) -> dict[str, Any]:
    return {
        "lo": lo,
        "hi": hi,
        "now": now,
        "job": job,
        "stretch": IDLE_STRETCH,
        "stretch_minutes": IDLE_STRETCH / timedelta(minutes=1),
        "idle": IDLE_BELOW_PCT,
        "look_back": LOOK_BACK,
        "max_w": MAX_BOARD_W,
    }


async def compute_hour(conn: AsyncConnection[Any], hour: datetime, now: datetime) -> bool:
    """Rebuild usage_1h's rows of `hour` (its start) from the minute rollups, and record it; False (nothing
    done) while another collector replica is computing usage."""
    final = now >= hour + timedelta(hours=1) + FINAL_AFTER
    async with conn.transaction():
        # A transaction's lock: it cannot outlive a failed statement on a pooled connection.
        locked = await (await conn.execute("SELECT pg_try_advisory_xact_lock(%s)", (USAGE_LOCK_KEY,))).fetchone()
        if not (locked and locked[0]):
            return False
        await conn.execute("DELETE FROM usage_1h WHERE bucket = %s", (hour,))
        # Never a prepared statement: after five runs on one connection psycopg prepares it, PostgreSQL may
        # settle on a generic plan for it, and one such plan took 250 s against 0.6 s planned per call.
        await conn.execute(HOUR_INSERT, usage_params(hour, hour + timedelta(hours=1), now), prepare=False)
        await conn.execute(
            "INSERT INTO usage_hour (bucket, computed_at, final) VALUES (%s, %s, %s)"
            " ON CONFLICT (bucket) DO UPDATE SET computed_at = EXCLUDED.computed_at, final = EXCLUDED.final",
            (hour, now, final),
        )
    return True


# Hours from the first allocation (at most `keep` back) to now that were never computed, or may have
# changed since: still running or settling (every REFRESH), or due their final pass. Newest first.
_DUE = (
    "SELECT h FROM generate_series(date_trunc('hour', greatest(%(first)s, %(now)s - %(keep)s)),"
    "   date_trunc('hour', %(now)s), interval '1 hour') AS h LEFT JOIN usage_hour u ON u.bucket = h"
    " WHERE u.bucket IS NULL OR (NOT u.final AND u.computed_at < %(now)s - %(refresh)s"
    "   AND (u.computed_at < h + interval '1 hour' + %(settled)s OR %(now)s >= h + interval '1 hour' + %(final)s))"
    " ORDER BY h DESC"
)


async def due_hours(conn: AsyncConnection[Any], now: datetime, keep: timedelta) -> list[datetime]:
    first = await (await conn.execute("SELECT min(started_at) FROM job_allocation")).fetchone()
    if first is None or first[0] is None:
        return []
    cur = await conn.execute(
        _DUE,
        {"first": first[0], "now": now, "keep": keep, "refresh": REFRESH, "settled": SETTLED, "final": FINAL_AFTER},
    )
    return [row[0] for row in await cur.fetchall()]


async def update_usage(
    conn: AsyncConnection[Any], keep: timedelta, now: datetime | None = None, budget_s: float = PASS_SECONDS
) -> int:
    """Compute the hours that are due, newest first, for at most `budget_s`; returns how many. `keep`:
    how far back to fill (the minute rollups' retention: older hours have no minutes to read). One collector
    replica at a time: another's work in progress ends this pass."""
    now = now or datetime.now(UTC)
    started, done = time.monotonic(), 0
    for hour in await due_hours(conn, now, keep):
        computed = await compute_hour(conn, hour, now)
        if not conn.autocommit:  # a pool's connection: each hour lands on its own, and its lock goes
            await conn.commit()
        if not computed:
            break
        done += 1
        if time.monotonic() - started >= budget_s:
            break
    return done
