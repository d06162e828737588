"""The one query layer over the telemetry store: the read API, the dashboard and the alert views read
telemetry through it. Extensions keep their own state (the alert engine its alert tables, alerts/reads.py;
the straggler watch its stragglers) and read the samples they work on with their own windowed SELECTs."""

from gpuscope.collector.query.events import EventRow, events
from gpuscope.collector.query.fleet import FleetSummary, UnhealthyGpu, fleet_summary, unhealthy_gpus
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
from gpuscope.collector.query.jobs import JobGpu, JobRow, JobState, MigRow, Usage, job, job_gpus, jobs
from gpuscope.collector.query.memory_totals import memory_totals
from gpuscope.collector.query.nic import NicSeries, nic_series
from gpuscope.collector.query.rack_power import RackPower, rack_nameplate_w, rack_power
from gpuscope.collector.query.spacing import fillable_bucket, fillable_buckets, sample_spacing
from gpuscope.collector.query.stragglers import JudgingModel, StragglerRow, judging_model, stragglers
from gpuscope.collector.query.timerange import TimeRange, bucket_for, last, source_bucket
from gpuscope.collector.query.top import TopGpu, top_gpus

__all__ = [
    "EventRow",
    "FleetSummary",
    "GpuRow",
    "Heatmap",
    "JobGpu",
    "JobRow",
    "JobState",
    "JudgingModel",
    "MigRow",
    "NicSeries",
    "PortRow",
    "RackPower",
    "Series",
    "StragglerRow",
    "TimeRange",
    "TopGpu",
    "UnhealthyGpu",
    "Usage",
    "bucket_for",
    "events",
    "fillable_bucket",
    "fillable_buckets",
    "fleet_summary",
    "heatmap",
    "held_by",
    "inventory_counts",
    "job",
    "job_gpus",
    "jobs",
    "judging_model",
    "last",
    "memory_totals",
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
    "top_gpus",
    "unhealthy_gpus",
]

# Appended: the jobs pages' efficiency summary and filters.
from gpuscope.collector.query.job_efficiency import (
    IDLE_BELOW_PCT,
    MEMORY_WINDOW,
    JobEfficiency,
    PeakMemory,
    job_efficiency,
)
from gpuscope.collector.query.job_owners import JobOwners, job_owners

__all__ += [
    "IDLE_BELOW_PCT",
    "MEMORY_WINDOW",
    "JobEfficiency",
    "JobOwners",
    "PeakMemory",
    "job_efficiency",
    "job_owners",
]

# The node page's reads (dashboard/node_data.py); energy_kwh is the fleet's energy too.
from gpuscope.collector.query.counters import CounterUse, StateUse, Summary, summarise  # noqa: E402
from gpuscope.collector.query.energy import Energy, energy, energy_kwh  # noqa: E402
from gpuscope.collector.query.node_health import (  # noqa: E402
    GpuHealth,
    PortHealth,
    gpu_health,
    node_gpus,
    port_health,
)
from gpuscope.collector.query.node_jobs import NodeJob, node_jobs  # noqa: E402
from gpuscope.collector.query.nvlink import NvlinkSeries, nvlink_throughput  # noqa: E402

__all__ += [
    "CounterUse",
    "Energy",
    "GpuHealth",
    "NodeJob",
    "NvlinkSeries",
    "PortHealth",
    "StateUse",
    "Summary",
    "energy",
    "energy_kwh",
    "gpu_health",
    "node_gpus",
    "node_jobs",
    "nvlink_throughput",
    "port_health",
    "summarise",
]

# The dashboard's search box.
from gpuscope.collector.query.search import Found, search  # noqa: E402

__all__ += ["Found", "search"]

# The node page's slowdown and temperature findings (dashboard/node_data.py).
from gpuscope.collector.query.throttling import Throttling, throttling  # noqa: E402

__all__ += ["Throttling", "throttling"]

from gpuscope.collector.query.fleet_health import (  # noqa: E402
    NODE_STATES,
    ActionRow,
    DryRunDrain,
    EvidenceRow,
    GpuVerdict,
    HealthCounts,
    NodeHealth,
    OutOfHealth,
    TransitionRow,
    health_actions,
    health_counts,
    health_nodes,
    health_transitions,
    out_of_health,
)

__all__ += [
    "NODE_STATES",
    "ActionRow",
    "DryRunDrain",
    "EvidenceRow",
    "GpuVerdict",
    "HealthCounts",
    "NodeHealth",
    "OutOfHealth",
    "TransitionRow",
    "health_actions",
    "health_counts",
    "health_nodes",
    "health_transitions",
    "out_of_health",
]
