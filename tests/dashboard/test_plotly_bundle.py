"""The partial plotly.js bundle the pages run (dashboard/plotly_bundle.py) is the plotly.js version that
the plotly Python package builds its figures for, and the one Dash puts on every page."""

from __future__ import annotations

import httpx
from plotly.offline import get_plotlyjs_version

from gpuscope.dashboard.plotly_bundle import bundle_path, bundle_version
from tests.dashboard.helpers import serving


def test_the_bundle_is_the_plotly_js_that_plotly_python_builds_figures_for() -> None:
    assert bundle_version() == get_plotlyjs_version(), (
        f"plotly (Python) builds figures for plotly.js {get_plotlyjs_version()}, the dashboard runs"
        f" {bundle_version()}: update {bundle_path().name} as dashboard/plotly_bundle.py says"
    )


def test_every_page_loads_the_bundle_before_dash_starts() -> None:
    with serving() as url:
        page = httpx.get(url + "/", timeout=10).text
    bundle = page.index(f"/assets/{bundle_path().name}")
    assert bundle < page.index("dash_renderer"), "window.Plotly must exist before any graph mounts"
    assert "package_data/plotly.min.js" not in page
