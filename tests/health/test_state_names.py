"""A node's health states are written once (health/model.py's State): the reads, the API's `state`
parameter and the CLI's choices all follow it, in the health loop's order."""

from __future__ import annotations

from typing import get_args

from gpuscope.health.api import StateName
from gpuscope.health.cli import STATES
from gpuscope.health.model import State
from gpuscope.health.reads import NODE_STATES


def test_every_list_of_node_states_is_the_models() -> None:
    assert NODE_STATES == tuple(State) == ("healthy", "suspect", "unhealthy", "drained", "validating")
    assert get_args(StateName) == NODE_STATES, "the API's parameter (a Literal, so /openapi.json lists them)"
    assert STATES == NODE_STATES
