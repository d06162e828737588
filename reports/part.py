"""Reports as a collector part: the reports API, with the site's prices and grid; the digests' opt-out
API; and, where the configuration has a `digest:`, the digest scheduler as a leader task."""

from __future__ import annotations

from pathlib import Path

from gpuscope.collector.parts import Part
from gpuscope.reports.api import reports_router
from gpuscope.reports.config import ReportsConfig
from gpuscope.reports.digest.api import opt_out_router
from gpuscope.reports.digest.loop import digest_task
from gpuscope.reports.digest.settings import digest_settings_from


def reports_part(config: ReportsConfig | None = None, base: Path = Path()) -> Part:
    """`base`: where the digest's relative file paths (url_file, password_file, ...) are read from."""
    config = config or ReportsConfig()
    # Checked now, so that a wrong digest configuration stops the start with a message naming the key.
    digest = digest_settings_from(config.digest, base) if config.digest is not None else None
    return Part(
        name="reports",
        routers=(reports_router(config.rates), opt_out_router(digest.opt_out if digest else frozenset())),
        leader_tasks=(digest_task(digest, config.rates),) if digest else (),
    )
