"""Headless Chromium (Debian's chromium + chromium-driver) driven through Selenium, for the dashboard's
browser tests and benchmark: console errors collected, screenshots kept as test artifacts."""

from __future__ import annotations

import base64
import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "dashboard"  # the checkout's root
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--no-first-run", "--window-size=1400,1000",
)  # fmt: skip
# A page is rendered when Dash has no callback in flight, every graph holds its figure (traces, or the
# annotation of an empty-state figure; an unfilled dcc.Graph has neither) and every output area that
# callbacks fill (class "output") has content, and every table drawn as Markdown (dashboard/html_table.py) is
# drawn for good.
RENDERED_JS = """
const page = document.getElementById('page');
if (!page || page.children.length === 0 || document.querySelector('[data-dash-is-loading="true"]')) return false;
for (const g of page.querySelectorAll('.js-plotly-plot')) {
  if (!g.data || (g.data.length === 0 && !((g.layout || {}).annotations || []).length)) return false;
}
for (const o of page.querySelectorAll('.output')) { if (o.childElementCount === 0) return false; }
// A table drawn as Markdown is final once Markdown's highlighter has loaded (it redraws then).
if (page.querySelector('.html-table-box')) {
  if (!performance.getEntriesByType('resource').some(e => e.name.includes('async-highlight'))) return false;
  for (const box of page.querySelectorAll('.html-table-box')) { if (!box.querySelector('table')) return false; }
}
return page.querySelectorAll('.dash-graph').length === page.querySelectorAll('.js-plotly-plot').length;
"""


def find_browser() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    driver = shutil.which("chromedriver") or (
        "/usr/lib/chromium/chromedriver" if Path("/usr/lib/chromium/chromedriver").exists() else None
    )
    return (browser, driver) if browser and driver else None


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    found = find_browser()
    if found is None:
        raise RuntimeError("Chromium and chromedriver are needed: apt-get install chromium chromium-driver")
    browser, driver_path = found
    profile = tempfile.mkdtemp(prefix="gpuscope-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_until(driver: Any, condition: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = condition()
        except Exception:  # the page may be between renders
            result = None
        if result:
            return result
        time.sleep(0.05)
    screenshot(driver, f"timeout-{what.replace(' ', '-')}")
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def open_page(driver: Any, url: str, timeout: float = 30.0) -> float:
    """Load `url` and wait for the page's first full render; returns the seconds it took."""
    started = time.perf_counter()
    driver.get(url)
    wait_until(driver, lambda: driver.execute_script(RENDERED_JS), timeout, f"render of {url}")
    return time.perf_counter() - started


# Where a page load's time went, from the browser's resource timings: the scripts it fetched (kB, as
# decoded: what the browser compiles) and the server's time on its slowest Dash callback.
BREAKDOWN_JS = """
const res = performance.getEntriesByType('resource');
const scripts = res.filter(e => e.initiatorType === 'script' || /\\.js(\\?|$)/.test(e.name));
const callbacks = res.filter(e => e.name.includes('_dash-update-component'));
return {
  scripts_kb: Math.round(scripts.reduce((sum, e) => sum + e.decodedBodySize, 0) / 1000),
  slowest_callback_server_ms: Math.round(Math.max(0, ...callbacks.map(e => e.responseStart - e.requestStart))),
};
"""


def load_breakdown(driver: Any) -> dict[str, int]:
    """For the page just opened: {"scripts_kb", "slowest_callback_server_ms"} (see BREAKDOWN_JS)."""
    return {key: int(value) for key, value in driver.execute_script(BREAKDOWN_JS).items()}


def console_errors(driver: Any) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def screenshot(driver: Any, name: str, whole_page: bool = False) -> Path:
    """The window as it shows, or with `whole_page` the page from top to bottom (through the DevTools
    protocol: resizing the window instead would make Plotly redraw every chart)."""
    path = ARTIFACTS / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not whole_page:
        driver.save_screenshot(str(path))
        return path
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 8000), "scale": 1}
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True, "clip": clip}
    )
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


# The label Plotly draws for a hover event on a dcc.Graph: points ([{curveNumber, pointNumber}]) or a
# pixel position; '' when it draws none.
HOVER_JS = """
const [graph, hover] = arguments;
const gd = document.querySelector('#' + graph + ' .js-plotly-plot');
Plotly.Fx.hover(gd, hover);
const layer = gd.querySelector('.hoverlayer');
return layer ? layer.textContent : '';
"""


# The trace types drawn on the page, the types the page's Plotly can draw (its bundle's), and whether
# the page fetched Dash's full bundle (dashboard/plotly_bundle.py: it never should).
PLOTLY_IN_USE_JS = """
const drawn = new Set();
for (const g of document.querySelectorAll('.js-plotly-plot')) {
  for (const t of g.data || []) drawn.add(t.type || 'scatter');
}
const full = performance.getEntriesByType('resource').some(e => e.name.includes(arguments[0]));
const known = window.Plotly ? Object.keys(Plotly.PlotSchema.get().traces) : [];
return {drawn: [...drawn].sort(), known: known, full: full};
"""


def plotly_in_use(driver: Any) -> dict[str, Any]:
    """{"drawn": trace types on the page, "known": types its Plotly can draw, "full": Dash's full bundle fetched}."""
    from gpuscope.dashboard.plotly_bundle import FULL_BUNDLE_URL_PART

    return dict(driver.execute_script(PLOTLY_IN_USE_JS, FULL_BUNDLE_URL_PART))


def plotly_hover(driver: Any, graph_id: str, hover: Any) -> str:
    """The text of the hover label Plotly draws on graph `graph_id` for `hover`."""
    return str(driver.execute_script(HOVER_JS, graph_id, hover))


def graph_data(driver: Any, graph_id: str) -> list[dict[str, Any]]:
    """The traces Plotly drew in a dcc.Graph, read from the page; numeric arrays as lists."""
    traces = driver.execute_script(
        "const el = document.getElementById(arguments[0]).querySelector('.js-plotly-plot');"
        "return el.data.map(t => ({type: t.type, x: t.x, y: t.y, z: t.z, name: t.name}));",
        graph_id,
    )
    return [{key: _plain(value) for key, value in trace.items()} for trace in traces]


def _plain(value: Any) -> Any:
    """Plotly sends numpy arrays as {"dtype", "bdata" (base64), "shape"}; everything else as it is."""
    if not (isinstance(value, dict) and "bdata" in value):
        return value
    array = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
    shape = value.get("shape")
    if shape:
        array = array.reshape([int(n) for n in str(shape).split(",")])
    return array.tolist()
