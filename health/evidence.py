"""The evidence of one health cycle: every documented rule (health/rules/) over the telemetry of a window.

A finding's time is that of the sample or event that shows it, in (since, until]; a rule over a longer
window (link flaps, thermal slowdown, repeat stragglers) reads its own window ending at `until` and
reports the moment its threshold was reached, which falls in (since, until] only once. So cycles over
consecutive windows find each thing once, and a window re-read finds the same findings with the same
(node, GPU, kind, code, time), the key the store keeps one row for.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from gpuscope.health.model import Evidence
from gpuscope.health.rules.config import EvidenceConfig
from gpuscope.health.rules.crossing import gravity
from gpuscope.health.rules.ecc import ecc_evidence
from gpuscope.health.rules.gpu_lost import lost_in_events, lost_in_samples
from gpuscope.health.rules.gpu_steps import gpu_steps
from gpuscope.health.rules.ib_flap import ib_flap_evidence
from gpuscope.health.rules.nvlink import nvlink_evidence
from gpuscope.health.rules.places import gpu_places
from gpuscope.health.rules.recovery import prefer_driver, recovery_evidence
from gpuscope.health.rules.remap import remap_evidence
from gpuscope.health.rules.straggler import straggler_evidence
from gpuscope.health.rules.thermal import thermal_evidence
from gpuscope.health.rules.xid import xid_evidence

__all__ = ["DEFAULT_CONFIG", "EvidenceConfig", "find_evidence"]

DEFAULT_CONFIG = EvidenceConfig()

EvidenceKey = tuple[int, int | None, str, int | None, datetime]


async def find_evidence(
    conn: AsyncConnection[Any], since: datetime, until: datetime, config: EvidenceConfig = DEFAULT_CONFIG
) -> list[Evidence]:
    """Findings in (since, until], oldest first."""
    steps = await gpu_steps(conn, since, until, config)
    places = await gpu_places(conn, {step.gpu_id for step in steps})
    found = [
        *await prefer_driver(conn, await xid_evidence(conn, since, until)),
        *await lost_in_events(conn, since, until),
        *lost_in_samples(steps, places),
        *ecc_evidence(steps, places),
        *remap_evidence(steps, places),
        *await recovery_evidence(conn, since, until, config),
        *await nvlink_evidence(conn, steps, places, since, until, config),
        *await thermal_evidence(conn, steps, places, since, until, config),
        *await ib_flap_evidence(conn, since, until, config),
        *await straggler_evidence(conn, since, until, config),
    ]
    return sorted(_once(found).values(), key=_in_order)


def evidence_key(evidence: Evidence) -> EvidenceKey:
    """What the store keeps one row for (migration 0014, health_evidence_once)."""
    return (evidence.node_id, evidence.gpu_id, evidence.kind, evidence.code, evidence.at)


def _once(found: list[Evidence]) -> dict[EvidenceKey, Evidence]:
    """One finding per key, the gravest: a GPU lost is both an exporter event and a sample at one time."""
    kept: dict[EvidenceKey, Evidence] = {}
    for evidence in found:
        key = evidence_key(evidence)
        if key not in kept or gravity(evidence.severity) > gravity(kept[key].severity):
            kept[key] = evidence
    return kept


def _in_order(evidence: Evidence) -> tuple[datetime, int, int, str, int]:
    gpu = -1 if evidence.gpu_index is None else evidence.gpu_index
    return (evidence.at, evidence.node_id, gpu, evidence.kind, -1 if evidence.code is None else evidence.code)
