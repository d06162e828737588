"""How well a job used what it held, beyond the means of jobs.py: the share of its GPU time spent idle, the
energy its GPUs drew, and its peak memory.

- Idle: a GPU-minute of an allocation whose mean utilisation was under IDLE_BELOW_PCT (the threshold of
  the GpuIdleInJob rule), or whose SM activity was, where the GPU reports no utilisation (MIG devices:
  NVML has none in MIG mode). Read from the minute rollup (MIG devices: their GPU instance's samples);
  minutes not yet rolled up (the last two or three) are not counted, as for the means.
- Energy, whole GPUs only (a MIG device shares its board's power with the other slices): the growth of
  the GPU's energy counter over the allocation, from its first and last samples near each end; where
  the counter is absent, went backwards (a driver reload resets it) or its samples are past raw
  retention, the minute rollup's mean power times each minute.
- Peak memory: the most framebuffer used on any of its GPUs (MIG devices: their GPU instance's) in the
  last MEMORY_WINDOW of each allocation, from raw samples: no rollup keeps memory, and a whole job's raw
  rows cost too much to read on every page view.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from psycopg import Connection

IDLE_BELOW_PCT = 5.0
MEMORY_WINDOW = timedelta(hours=1)
COUNTER_EDGE = timedelta(minutes=10)  # how far from each end of an allocation its counter sample may be

EnergySource = Literal["counter", "power", "mixed", "none"]

# The job's allocations; hi is where a running one stands now. Constants only: values are parameters.
ALLOC = (
    "WITH alloc AS (SELECT a.allocation_id, a.gpu_id, a.mig_id, a.started_at AS lo,"
    "   coalesce(a.ended_at, now()) AS hi, coalesce(d.slices::float8 / d.gpu_slices, 1) AS share"
    "   FROM job_allocation a LEFT JOIN mig_device d USING (mig_id) WHERE a.job_id = %(job)s)"
)
# Per allocation: GPU-minutes with an activity reading, the idle ones among them, and energy from power.
MINUTES_SQL = (
    ALLOC  # noqa: S608 (constants)
    + ", whole AS (SELECT a.allocation_id, a.share,"
    "   CASE WHEN r.util_n > 0 THEN r.util_sum / r.util_n"
    "        WHEN r.sm_active_n > 0 THEN r.sm_active_sum / r.sm_active_n END AS activity,"
    "   CASE WHEN r.power_n > 0 THEN r.power_sum / r.power_n * 60 END AS joules"
    "   FROM alloc a JOIN gpu_rollup_1m r ON r.gpu_id = a.gpu_id AND r.bucket >= a.lo AND r.bucket < a.hi"
    "   WHERE a.mig_id IS NULL),"
    # A MIG device: its GPU instance's samples (reported on its first compute instance), per minute.
    " slices AS (SELECT a.allocation_id, a.share, avg(s.sm_active_pct)::float8 AS activity,"
    "   NULL::float8 AS joules FROM alloc a JOIN mig_device d ON d.mig_id = a.mig_id"
    "   JOIN mig_device same ON same.gpu_id = d.gpu_id AND same.gpu_instance_id = d.gpu_instance_id"
    "   JOIN mig_sample s ON s.mig_id = same.mig_id AND s.ts >= a.lo AND s.ts < a.hi"
    "   WHERE s.sm_active_pct IS NOT NULL GROUP BY a.allocation_id, a.share, date_bin('1 minute', s.ts, 'epoch'))"
    " SELECT allocation_id, min(share), count(activity), count(*) FILTER (WHERE activity < %(idle)s),"
    "   sum(joules), count(joules)"
    " FROM (SELECT * FROM whole UNION ALL SELECT * FROM slices) AS m GROUP BY allocation_id"
)
# Per whole-GPU allocation: the energy counter's first and last readings near its two ends.
COUNTER_SQL = (
    ALLOC  # noqa: S608 (constants)
    + " SELECT a.allocation_id, first.e, last.e FROM alloc a"
    " LEFT JOIN LATERAL (SELECT energy_j AS e FROM gpu_sample WHERE gpu_id = a.gpu_id AND ts >= a.lo"
    "   AND ts < least(a.hi, a.lo + %(edge)s) AND energy_j IS NOT NULL ORDER BY ts LIMIT 1) first ON true"
    " LEFT JOIN LATERAL (SELECT energy_j AS e FROM gpu_sample WHERE gpu_id = a.gpu_id"
    "   AND ts >= greatest(a.lo, a.hi - %(edge)s) AND ts < a.hi AND energy_j IS NOT NULL"
    "   ORDER BY ts DESC LIMIT 1) last ON true"
    " WHERE a.mig_id IS NULL"
)
# The most memory used on each allocation's GPU (or GPU instance) in its last window, with the total then.
PEAK_MEMORY_SQL = (
    ALLOC  # noqa: S608 (constants)
    + " SELECT n.name, g.gpu_index, d.profile, peak.used, peak.total, peak.ts FROM alloc a"
    " JOIN gpu g ON g.gpu_id = a.gpu_id JOIN node n ON n.node_id = g.node_id"
    " LEFT JOIN mig_device d ON d.mig_id = a.mig_id"
    " CROSS JOIN LATERAL (SELECT s.fb_used_bytes AS used, s.fb_total_bytes AS total, s.ts FROM gpu_sample s"
    "   WHERE a.mig_id IS NULL AND s.gpu_id = a.gpu_id AND s.ts >= greatest(a.lo, a.hi - %(window)s)"
    "   AND s.ts < a.hi AND s.fb_used_bytes IS NOT NULL"
    "   UNION ALL SELECT s.fb_used_bytes, s.fb_total_bytes, s.ts FROM mig_device same JOIN mig_sample s"
    "   ON s.mig_id = same.mig_id WHERE same.gpu_id = d.gpu_id AND same.gpu_instance_id = d.gpu_instance_id"
    "   AND s.ts >= greatest(a.lo, a.hi - %(window)s) AND s.ts < a.hi AND s.fb_used_bytes IS NOT NULL"
    "   ORDER BY 1 DESC LIMIT 1) peak"
    " ORDER BY peak.used DESC, n.name, g.gpu_index LIMIT 1"
)


@dataclass(frozen=True)
class PeakMemory:
    used_bytes: int
    total_bytes: int | None  # None: the GPU did not report its total
    node: str
    gpu_index: int
    mig_profile: str | None  # the GPU instance's profile, when the peak was on a MIG device
    at: datetime


@dataclass(frozen=True)
class JobEfficiency:
    measured_gpu_hours: float  # GPU time with an activity reading, a MIG device for its share of the GPU
    idle_gpu_hours: float  # of which idle: under IDLE_BELOW_PCT
    energy_j: float | None  # None: no whole GPU of the job has an energy reading
    energy_source: EnergySource
    gpus_without_energy: int  # whole-GPU allocations with neither counter nor power readings
    peak_memory: PeakMemory | None  # None: no memory readings in the window

    @property
    def idle_share(self) -> float | None:
        return self.idle_gpu_hours / self.measured_gpu_hours if self.measured_gpu_hours > 0 else None


def job_efficiency(
    conn: Connection[Any], job_id: str, memory_window: timedelta = MEMORY_WINDOW
) -> JobEfficiency | None:
    """The job's idle share, energy and peak memory; None for a job the store does not know."""
    params = {"job": job_id, "idle": IDLE_BELOW_PCT, "edge": COUNTER_EDGE, "window": memory_window}
    minutes = {row[0]: row[1:] for row in conn.execute(MINUTES_SQL, params).fetchall()}
    counters = conn.execute(COUNTER_SQL, params).fetchall()
    if not counters and not minutes and not _known(conn, job_id):
        return None
    measured = idle = 0.0
    for share, with_activity, idle_minutes, _, _ in minutes.values():
        measured += share * with_activity / 60
        idle += share * idle_minutes / 60
    energy, sources, missing = 0.0, set(), 0
    for allocation_id, first, last in counters:
        if first is not None and last is not None and last >= first:
            energy += last - first
            sources.add("counter")
        elif allocation_id in minutes and minutes[allocation_id][4]:
            energy += minutes[allocation_id][3]
            sources.add("power")
        else:
            missing += 1
    source: EnergySource = "none"
    if sources:
        source = "mixed" if len(sources) > 1 else "counter" if "counter" in sources else "power"
    peak = conn.execute(PEAK_MEMORY_SQL, params).fetchone()
    return JobEfficiency(
        measured_gpu_hours=measured,
        idle_gpu_hours=idle,
        energy_j=energy if source != "none" else None,
        energy_source=source,
        gpus_without_energy=missing,
        peak_memory=PeakMemory(peak[3], peak[4], peak[0], peak[1], peak[2], peak[5]) if peak else None,
    )


def _known(conn: Connection[Any], job_id: str) -> bool:
    return conn.execute("SELECT 1 FROM job_allocation WHERE job_id = %s LIMIT 1", (job_id,)).fetchone() is not None
