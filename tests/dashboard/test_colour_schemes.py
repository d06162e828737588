"""Every page in the light and the dark colour scheme, in real headless Chromium over the busy little cluster
with firing alerts (busy_stack.py): each page is kept as a screenshot in test-artifacts/dashboard/schemes/,
and each is checked to be legible in that scheme: the page's background, its text, a chart's axis labels
and every panel with a background of its own follow the scheme (a fixed light grey left in the code
would glare in the dark one), no badge is cut short, and the operator's choice holds across pages and
reloads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from tests.dashboard.busy_stack import Stack, alerting_stack

PAGES = {  # screenshot name: path
    "overview": "/",
    "heatmap": "/heatmap",
    "power": "/power",
    "rack": "/power?rack=c/r1",
    "jobs": "/jobs",
    "job": "/jobs/train-7",
    "node": "/node/gpu-a02?gpu=2",
    "health": "/health",
    "reports": "/reports",
    "alerts": "/alerts",
    "search": "/search?q=gpu-b",
}

# Colours as the browser computed them, with their relative luminance (WCAG 2), for what the eye sees.
LOOK_JS = """
function rgba(text) {
  const m = text.match(/rgba?\\(([^)]+)\\)/);
  if (!m) return null;
  const p = m[1].split(',').map(Number);
  return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1};
}
function lum(c) {
  const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
  return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b);
}
const body = rgba(getComputedStyle(document.body).backgroundColor);
const text = rgba(getComputedStyle(document.querySelector('.shell')).color);
const tick = document.querySelector('#page .js-plotly-plot .xtick text, #page .js-plotly-plot .ytick text');
const panels = [];  // opaque backgrounds of the page's own elements (charts' insides are Plotly's)
for (const el of document.querySelectorAll('#page *')) {
  if (el.closest('.js-plotly-plot') || el.closest('#gpu-state-bar') || el.closest('.mantine-Badge-root')) continue;
  const c = rgba(getComputedStyle(el).backgroundColor);
  if (c && c.a > 0.5) panels.push({what: el.tagName + '#' + el.id + '.' + el.className, lum: lum(c)});
}
// A label cut short ("WARNI...") where its column was squeezed.
const clipped = Array.from(document.querySelectorAll('#page .badge, #page .badge .mantine-Badge-label'))
  .filter(b => getComputedStyle(b).overflow !== 'visible' && b.scrollWidth > b.clientWidth).map(b => b.textContent);
return {
  clipped: clipped,
  scheme: document.documentElement.getAttribute('data-mantine-color-scheme'),
  body: lum(body), text: lum(text),
  tick: tick ? lum(rgba(getComputedStyle(tick).fill)) : null,
  panels: panels,
};
"""


@pytest.fixture(scope="module")
def stack(postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with alerting_stack(postgres, tmp_path_factory.mktemp("auth") / "users") as running:
        yield running


def contrast(a: float, b: float) -> float:
    return (max(a, b) + 0.05) / (min(a, b) + 0.05)


def switch_to(browser: Any, scheme: str) -> None:
    if browser.execute_script("return document.documentElement.getAttribute('data-mantine-color-scheme')") != scheme:
        browser.execute_script("document.getElementById('colour-scheme').click()")
    wait_until(
        browser,
        lambda: (
            browser.execute_script("return document.documentElement.getAttribute('data-mantine-color-scheme')")
            == scheme
        ),
        what=f"the {scheme} scheme",
    )


def check_legible(look: dict[str, Any], scheme: str, page: str) -> None:
    assert look["scheme"] == scheme, page
    dark = scheme == "dark"
    assert (look["body"] < 0.05) if dark else (look["body"] > 0.9), (page, look["body"])
    assert contrast(look["body"], look["text"]) >= 7, (page, look)
    if look["tick"] is not None:
        assert contrast(look["body"], look["tick"]) >= 4.5, (page, look["tick"])
    assert not look["clipped"], (page, look["clipped"])
    glaring = [p["what"] for p in look["panels"] if (p["lum"] > 0.5 if dark else p["lum"] < 0.2)]
    assert not glaring, (page, glaring[:5])


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_reads_in_both_schemes(stack: Stack, browser: Any, scheme: str) -> None:
    open_page(browser, stack.dashboard + "/")
    switch_to(browser, scheme)
    for name, path in PAGES.items():
        open_page(browser, stack.dashboard + path)  # a reload: the choice must have been kept
        look = browser.execute_script(LOOK_JS)
        screenshot(browser, f"schemes/{name}-{scheme}", whole_page=True)
        check_legible(look, scheme, name)
    assert not console_errors(browser)


def test_the_switch_needs_no_reload_and_redraws_no_chart(stack: Stack, browser: Any) -> None:
    open_page(browser, stack.dashboard + "/")
    switch_to(browser, "light")
    browser.execute_script("window.marker = document.querySelector('#page .js-plotly-plot')")
    switch_to(browser, "dark")
    assert browser.execute_script("return window.marker === document.querySelector('#page .js-plotly-plot')")
    check_legible(browser.execute_script(LOOK_JS), "dark", "overview, switched in place")
