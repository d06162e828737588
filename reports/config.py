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

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from gpuscope.collector.query.usage import DEFAULT_GRID_G_PER_KWH, Rates
from gpuscope.core.config_file import FileModel, checked, read_config_file
from gpuscope.reports.digest.settings import DigestFile


class ReportsConfigError(ValueError):
    """A reports configuration gpuscope will not run with; the message says which key and why."""


@dataclass(frozen=True)
class ReportsConfig:
    rates: Rates = field(default_factory=Rates)
    digest: dict[str, Any] | None = None  # its secrets are read by reports/digest when the collector starts


class PriceFile(FileModel):
    model: Annotated[str, Field(min_length=1, max_length=200)]  # a model name or pattern such as '*H100*'
    per_gpu_hour: Annotated[float, Field(ge=0, lt=1e6)]


class ReportsFile(FileModel):
    currency: Annotated[str, Field(min_length=1, max_length=16)] | None = None  # EUR, USD, ...
    prices: list[PriceFile] | None = None
    grid_g_per_kwh: Annotated[float, Field(ge=0, lt=10000)] = DEFAULT_GRID_G_PER_KWH  # g CO2 per kWh
    digest: dict[str, Any] | None = None  # checked as a DigestFile


def load_reports_config(path: Path) -> ReportsConfig:
    """The configuration in `path`, its digest's keys checked too (each problem with its line); an empty
    file is the default configuration."""
    document = read_config_file(path, ReportsConfigError, empty={})
    config = checked(ReportsFile, document.data, ReportsConfigError, _config, document=document)
    if config.digest is not None:
        checked(DigestFile, config.digest, ReportsConfigError, _checked_only, at=("digest",), document=document)
    return config


def reports_config_from(raw: Any, where: str = "reports configuration") -> ReportsConfig:
    return checked(ReportsFile, raw, ReportsConfigError, _config, where)


def _config(file: ReportsFile) -> ReportsConfig:
    prices = tuple((price.model, price.per_gpu_hour) for price in file.prices or ())
    rates = Rates(currency=file.currency, prices=prices, grid_g_per_kwh=file.grid_g_per_kwh)
    return ReportsConfig(rates=rates, digest=file.digest)


def _checked_only(digest: DigestFile) -> None:
    """The digest's secrets are read when the collector starts, not where only the prices are wanted."""
