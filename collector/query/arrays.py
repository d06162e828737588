"""Turning result matrices into JSON- and Plotly-ready lists, where a gap (NaN) becomes null."""

from __future__ import annotations

from typing import Any

import numpy as np


def nan_to_none(values: np.ndarray) -> list[Any]:
    """Nested lists of the same shape, with None where `values` is NaN."""
    out = values.astype(object)
    out[np.isnan(values)] = None
    return out.tolist()
