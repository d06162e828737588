"""The one query layer: the read API, the dashboard, the detector and the alerts all read through it."""

from collector.query.alerts import AlertRow, NotificationRow, RuleStatus, alerts, notifications, rule_status, silences
from collector.query.events import EventRow, events
from collector.query.fleet import FleetSummary, fleet_summary
from collector.query.heatmap import Heatmap, Series, heatmap, series
from collector.query.inventory import GpuRow, PortRow, inventory_counts, select_gpus, select_ports
from collector.query.jobs import JobGpu, JobRow, JobState, Usage, job, job_gpus, jobs
from collector.query.nic import NicSeries, nic_series
from collector.query.rack_power import RackPower, rack_nameplate_w, rack_power
from collector.query.stragglers import StragglerRow, stragglers
from collector.query.timerange import TimeRange, bucket_for, last

__all__ = [
    "AlertRow",
    "EventRow",
    "FleetSummary",
    "GpuRow",
    "Heatmap",
    "JobGpu",
    "JobRow",
    "JobState",
    "NicSeries",
    "NotificationRow",
    "PortRow",
    "RackPower",
    "RuleStatus",
    "Series",
    "StragglerRow",
    "TimeRange",
    "Usage",
    "alerts",
    "bucket_for",
    "events",
    "fleet_summary",
    "heatmap",
    "inventory_counts",
    "job",
    "job_gpus",
    "jobs",
    "last",
    "nic_series",
    "notifications",
    "rack_nameplate_w",
    "rack_power",
    "rule_status",
    "select_gpus",
    "select_ports",
    "series",
    "silences",
    "stragglers",
]
