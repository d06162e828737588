"""The metric catalog: every metric the exporter knows, kept as data in catalog.csv."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Literal

Scope = Literal["gpu", "nvlink", "ib", "mig"]  # mig: per MIG GPU instance, exposed only (not on the wire)


@dataclass(frozen=True)
class MetricSpec:
    key: str  # wire-format and database column name; values travel in native_unit
    scope: Scope
    type: Literal["gauge", "counter"]
    native_unit: str
    prom_name: str  # base units, Prometheus conventions; "" where the exporter writes the family itself
    prom_scale: float  # native value * prom_scale = exposed value
    dcgm_name: str | None
    dcgm_scale: float | None
    help: str
    wire: bool  # sent to the collector (and stored); False: served on /metrics only


@cache
def load_catalog() -> tuple[MetricSpec, ...]:
    text = resources.files("gpuscope.exporter").joinpath("catalog.csv").read_text(encoding="utf-8")
    specs = []
    for row in csv.DictReader(text.splitlines()):
        specs.append(
            MetricSpec(
                key=row["key"],
                scope=row["scope"],  # type: ignore[arg-type]
                type=row["type"],  # type: ignore[arg-type]
                native_unit=row["native_unit"],
                prom_name=row["prom_name"],
                prom_scale=float(row["prom_scale"]),
                dcgm_name=row["dcgm_name"] or None,
                dcgm_scale=float(row["dcgm_scale"]) if row["dcgm_scale"] else None,
                help=row["help"],
                wire=row["wire"] == "yes",
            )
        )
    return tuple(specs)


def metrics_for(scope: Scope) -> tuple[MetricSpec, ...]:
    return tuple(spec for spec in load_catalog() if spec.scope == scope)


def keys_for(scope: Scope) -> tuple[str, ...]:
    """The keys of `scope` that travel to the collector: the wire format's columns."""
    return tuple(spec.key for spec in metrics_for(scope) if spec.wire)
