"""The one query layer over the telemetry store: the read API, the dashboard and the alert views read
telemetry through it. Extensions keep their own state (the alert engine its alert tables, alerts/reads.py;
the straggler watch its stragglers) and read the samples they work on with their own windowed SELECTs."""

from gpuscope.collector.query.events import EventRow, events
from gpuscope.collector.query.fleet import FleetSummary, UnhealthyGpu, fleet_summary, unhealthy_gpus
from gpuscope.collector.query.heatmap import Heatmap, Series, heatmap, series
from gpuscope.collector.query.inventory import (
    GpuRow,
    PortRow,
    inventory_counts,
    rack_count,
    select_gpus,
    select_ports,
)
from gpuscope.collector.query.jobs import JobGpu, JobRow, JobState, MigRow, Usage, job, job_gpus, jobs
from gpuscope.collector.query.nic import NicSeries, nic_series
from gpuscope.collector.query.rack_power import RackPower, rack_nameplate_w, rack_power
from gpuscope.collector.query.spacing import fillable_bucket, fillable_buckets, sample_spacing
from gpuscope.collector.query.stragglers import StragglerRow, stragglers
from gpuscope.collector.query.timerange import TimeRange, bucket_for, last, source_bucket

__all__ = [
    "EventRow",
    "FleetSummary",
    "GpuRow",
    "Heatmap",
    "JobGpu",
    "JobRow",
    "JobState",
    "MigRow",
    "NicSeries",
    "PortRow",
    "RackPower",
    "Series",
    "StragglerRow",
    "TimeRange",
    "UnhealthyGpu",
    "Usage",
    "bucket_for",
    "events",
    "fillable_bucket",
    "fillable_buckets",
    "fleet_summary",
    "heatmap",
    "inventory_counts",
    "job",
    "job_gpus",
    "jobs",
    "last",
    "nic_series",
    "rack_count",
    "rack_nameplate_w",
    "rack_power",
    "sample_spacing",
    "select_gpus",
    "select_ports",
    "series",
    "source_bucket",
    "stragglers",
    "unhealthy_gpus",
]
