"""The health page's reads (health/reads.py, health/episode_reads.py), in one connection: the count of nodes
per state, the nodes the view asks for, and over its range the audit trail, the episodes and how their
repairs held."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg_pool import ConnectionPool

from gpuscope.collector.query.timerange import TimeRange
from gpuscope.health.episode_reads import EpisodeRow, RepairOutcome, episodes, repair_outcomes
from gpuscope.health.reads import (
    ActionRow,
    HealthCounts,
    NodeHealth,
    TransitionRow,
    health_actions,
    health_counts,
    health_nodes,
    health_transitions,
)


@dataclass(frozen=True)
class HealthData:
    counts: HealthCounts
    nodes: list[NodeHealth]
    transitions: list[TransitionRow]
    actions: list[ActionRow]
    episodes: list[EpisodeRow]
    repairs: list[RepairOutcome]


def load_health(
    pool: ConnectionPool[Any], state: str | None, held: bool, window: TimeRange, shown_max: int
) -> HealthData:
    """`state` None: every node not healthy; `held`: the nodes an operator holds, whatever their state.
    Each trail (and the episodes) holds at most `shown_max` + 1 rows, so that the page can tell there are more."""
    with pool.connection() as conn:
        counts = health_counts(conn)
        if held:
            nodes = [n for n in health_nodes(conn) if n.held_by]
        else:
            nodes = health_nodes(conn, state=state, with_healthy=state == "healthy")
        transitions = health_transitions(conn, window, limit=shown_max + 1)
        actions = health_actions(conn, window, limit=shown_max + 1)
        found = episodes(conn, window, limit=shown_max + 1)
        repairs = repair_outcomes(conn, window)
    return HealthData(counts, nodes, transitions, actions, found, repairs)
