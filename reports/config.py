"""A site's reports configuration, loaded from YAML (`--reports-config FILE`, docs/reports.md): its
currency and prices per GPU model, its grid's carbon intensity, and the digests (reports/digest).

    currency: EUR
    prices:                       # per GPU-hour allocated; shell-style patterns, first match wins
      - {model: "*H100*", per_gpu_hour: 2.50}
      - {model: "*A100*", per_gpu_hour: 1.20}
    grid_g_per_kwh: 350           # until a loaded series covers the hour (gpuscope reports grid-load)
    digest: {...}                 # optional: weekly chat summaries and waste emails
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscope.collector.query.usage import DEFAULT_GRID_G_PER_KWH, Rates
from gpuscope.core.yaml_file import read_yaml

KEYS = ("currency", "prices", "grid_g_per_kwh", "digest")


class ReportsConfigError(ValueError):
    """A reports configuration gpuscope will not run with; the message says which key and why."""


@dataclass(frozen=True)
class ReportsConfig:
    rates: Rates = field(default_factory=Rates)
    digest: dict[str, Any] | None = None  # validated by reports/digest when the collector starts


def load_reports_config(path: Path) -> ReportsConfig:
    raw = read_yaml(path, "reports configuration", ReportsConfigError)
    return reports_config_from(raw, str(path))


def reports_config_from(raw: Any, where: str = "reports configuration") -> ReportsConfig:
    if not isinstance(raw, dict):
        raise ReportsConfigError(f"{where}: expected a mapping of keys to values")
    unknown = sorted(set(map(str, raw)) - set(KEYS))
    if unknown:
        raise ReportsConfigError(f"{where}: unknown key(s) {', '.join(unknown)}; known: {', '.join(KEYS)}")
    currency = raw.get("currency")
    if currency is not None and (not isinstance(currency, str) or not 0 < len(currency) <= 16):
        raise ReportsConfigError(f"{where}: currency must be a short text such as EUR or USD")
    grid = raw.get("grid_g_per_kwh", DEFAULT_GRID_G_PER_KWH)
    if not _number(grid) or not 0 <= grid < 10000:
        raise ReportsConfigError(f"{where}: grid_g_per_kwh must be a number of grams of CO2 per kWh, 0 to 10000")
    digest = raw.get("digest")
    if digest is not None and not isinstance(digest, dict):
        raise ReportsConfigError(f"{where}: digest must be a mapping")
    rates = Rates(currency=currency, prices=_prices(raw.get("prices") or [], where), grid_g_per_kwh=float(grid))
    return ReportsConfig(rates=rates, digest=digest)


def _prices(raw: Any, where: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(raw, list):
        raise ReportsConfigError(f"{where}: prices must be a list of {{model: PATTERN, per_gpu_hour: PRICE}}")
    prices = []
    for i, entry in enumerate(raw):
        if not isinstance(entry, dict) or set(entry) != {"model", "per_gpu_hour"}:
            raise ReportsConfigError(f"{where}: prices[{i}] must have exactly the keys model and per_gpu_hour")
        model, price = entry["model"], entry["per_gpu_hour"]
        if not isinstance(model, str) or not model or len(model) > 200:
            raise ReportsConfigError(f"{where}: prices[{i}].model must be a model name or pattern such as '*H100*'")
        if not _number(price) or not 0 <= price < 1e6:
            raise ReportsConfigError(f"{where}: prices[{i}].per_gpu_hour must be a number, 0 or more")
        prices.append((model, float(price)))
    return tuple(prices)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
