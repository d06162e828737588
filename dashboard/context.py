"""What every page needs: the database pool (a replica will do) and the dashboard's options."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from psycopg_pool import ConnectionPool

from gpuscope.collector.query.usage import Rates

REFRESH_MS = 5000
# Callback requests carry a few kilobytes of component state. The largest, the heatmap's click, sends
# back ~40 bytes per row, at most ~3,300 rows (grid.MAX_CELLS over 60 columns): ~130 KB.
MAX_BODY_BYTES = 1 << 20


@dataclass(frozen=True)
class DashboardOptions:
    collector_url: str | None = None  # silences are created and expired through the collector's API
    rack_budgets_kw: dict[str, float] = field(default_factory=dict)  # "cluster/rack" or "rack" -> kW
    refresh_ms: int = REFRESH_MS
    max_body_bytes: int = MAX_BODY_BYTES  # larger request bodies are refused with 413 before being read
    rates: Rates = field(default_factory=Rates)  # the reports page's prices and grid (--reports-config)


@dataclass(frozen=True)
class Context:
    pool: ConnectionPool[Any]
    options: DashboardOptions


def read_rack_budgets(path: Path) -> dict[str, float]:
    """`rack-00: 40` or `prod/rack-00: 40.5` per line of YAML: each rack's power budget in kW."""
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"cannot read rack budgets {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a mapping of rack names to kW")
    budgets = {}
    for rack, kw in doc.items():
        if isinstance(kw, bool) or not isinstance(kw, int | float) or kw <= 0:
            raise ValueError(f"{path}: {rack}: the budget must be a positive number of kW, got {kw!r}")
        budgets[str(rack)] = float(kw)
    return budgets
