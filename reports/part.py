"""Reports as a collector part: the reports API, with the site's prices and grid."""

from __future__ import annotations

from gpuscope.collector.parts import Part
from gpuscope.reports.api import reports_router
from gpuscope.reports.config import ReportsConfig


def reports_part(config: ReportsConfig | None = None) -> Part:
    config = config or ReportsConfig()
    return Part(name="reports", routers=(reports_router(config.rates),))
