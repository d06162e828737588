"""The one query layer: the read API, the dashboard, the detector and the alerts all read through it."""

from collector.query.fleet import FleetSummary, fleet_summary
from collector.query.heatmap import Heatmap, HeatmapRow, heatmap
from collector.query.rack_power import RackPower, rack_power
from collector.query.timerange import TimeRange, bucket_for, last

__all__ = [
    "FleetSummary",
    "Heatmap",
    "HeatmapRow",
    "RackPower",
    "TimeRange",
    "bucket_for",
    "fleet_summary",
    "heatmap",
    "last",
    "rack_power",
]
