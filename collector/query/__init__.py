"""The one query layer over the telemetry store: the read API, the dashboard and the alert views read
telemetry through it. Extensions keep their own state and its reads (alerts/reads.py, stragglers/reads.py,
health/reads.py) and read the samples they work on with their own windowed SELECTs."""

from gpuscope.collector.query.counters import CounterUse, StateUse, Summary, summarise
from gpuscope.collector.query.energy import Energy, energy, energy_kwh
from gpuscope.collector.query.events import EventRow, events
from gpuscope.collector.query.fleet import (
    FleetSummary,
    UnhealthyGpu,
    fleet_overview,
    fleet_summary,
    jobs_with_idle_gpus,
    unhealthy_gpus,
)
from gpuscope.collector.query.heatmap import Heatmap, Series, heatmap, series
from gpuscope.collector.query.held_by import held_by
from gpuscope.collector.query.inventory import (
    GpuRow,
    PortRow,
    inventory_counts,
    rack_count,
    select_gpus,
    select_ports,
)
from gpuscope.collector.query.job_efficiency import (
    IDLE_BELOW_PCT,
    MEMORY_WINDOW,
    JobEfficiency,
    PeakMemory,
    job_efficiency,
)
from gpuscope.collector.query.job_owners import JobOwners, job_owners
from gpuscope.collector.query.jobs import JobGpu, JobRow, JobState, MigRow, Usage, job, job_gpus, jobs
from gpuscope.collector.query.memory_totals import memory_totals
from gpuscope.collector.query.nic import NicSeries, nic_series
from gpuscope.collector.query.node_health import GpuHealth, PortHealth, gpu_health, node_gpus, port_health
from gpuscope.collector.query.node_jobs import NodeJob, node_jobs
from gpuscope.collector.query.nvlink import NvlinkSeries, nvlink_throughput
from gpuscope.collector.query.rack_power import RackPower, rack_nameplate_w, rack_power
from gpuscope.collector.query.search import Found, search
from gpuscope.collector.query.spacing import fillable_bucket, fillable_buckets, sample_spacing
from gpuscope.collector.query.throttling import Throttling, throttling
from gpuscope.collector.query.timerange import TimeRange, bucket_for, last, source_bucket
from gpuscope.collector.query.top import TopGpu, top_gpus

__all__ = [
    "IDLE_BELOW_PCT",
    "MEMORY_WINDOW",
    "CounterUse",
    "Energy",
    "EventRow",
    "FleetSummary",
    "Found",
    "GpuHealth",
    "GpuRow",
    "Heatmap",
    "JobEfficiency",
    "JobGpu",
    "JobOwners",
    "JobRow",
    "JobState",
    "MigRow",
    "NicSeries",
    "NodeJob",
    "NvlinkSeries",
    "PeakMemory",
    "PortHealth",
    "PortRow",
    "RackPower",
    "Series",
    "StateUse",
    "Summary",
    "Throttling",
    "TimeRange",
    "TopGpu",
    "UnhealthyGpu",
    "Usage",
    "bucket_for",
    "energy",
    "energy_kwh",
    "events",
    "fillable_bucket",
    "fillable_buckets",
    "fleet_overview",
    "fleet_summary",
    "gpu_health",
    "heatmap",
    "held_by",
    "inventory_counts",
    "job",
    "job_efficiency",
    "job_gpus",
    "job_owners",
    "jobs",
    "jobs_with_idle_gpus",
    "last",
    "memory_totals",
    "nic_series",
    "node_gpus",
    "node_jobs",
    "nvlink_throughput",
    "port_health",
    "rack_count",
    "rack_nameplate_w",
    "rack_power",
    "sample_spacing",
    "search",
    "select_gpus",
    "select_ports",
    "series",
    "source_bucket",
    "summarise",
    "throttling",
    "top_gpus",
    "unhealthy_gpus",
]
