"""The plotly.js the browser runs: plotly.js's own "cartesian" partial bundle (bar, box, contour, heatmap,
histogram, image, pie, scatter, violin, ...), served from assets/ as a plain script.

Why: Dash otherwise sends its full plotly.min.js (4.8 MB, every trace type: maps, 3D, WebGL) with the
first graph, and compiling it was most of a cold page's time; this one is 1.5 MB. A page that defines
window.Plotly before Dash starts is never sent the full bundle: dcc.Graph uses the Plotly it finds.

The pages draw heatmaps, lines (scatter) and bars: a figure of another type needs a bundle that holds it
(tests/dashboard/test_browser.py fails on a drawn type the page's Plotly does not know).

Upgrading the plotly Python package: take the same plotly.js version's bundle, as
    npm pack plotly.js-cartesian-dist-min@VERSION   (VERSION: plotly.offline.get_plotlyjs_version())
and put its plotly-cartesian.min.js here as assets/plotly-cartesian-VERSION.min.js in place of the old
one (tests/dashboard/test_plotly_bundle.py fails while the versions differ)."""

from __future__ import annotations

import re
from pathlib import Path

ASSETS = Path(__file__).resolve().parent / "assets"
FULL_BUNDLE_URL_PART = "plotly/package_data/plotly.min.js"  # where Dash serves its full bundle from
_HEADER = re.compile(rb"plotly\.js \(cartesian - minified\) v(\d+\.\d+\.\d+)")


def bundle_path() -> Path:
    """The one plotly.js bundle in assets/ (two would both run, the later one winning)."""
    found = sorted(ASSETS.glob("plotly-*.min.js"))
    if len(found) != 1:
        raise RuntimeError(f"expected one plotly-*.min.js in {ASSETS}, found {[p.name for p in found]}")
    return found[0]


def bundle_version() -> str:
    """The plotly.js version the bundle's licence header names."""
    path = bundle_path()
    with path.open("rb") as file:
        match = _HEADER.search(file.read(400))
    if match is None:
        raise RuntimeError(f"{path.name} does not start with a plotly.js cartesian bundle's header")
    return match.group(1).decode()
