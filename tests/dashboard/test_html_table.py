"""Tables drawn as one Markdown (dashboard/html_table.py) show hostile text as text: markup, JSX
expressions and quotes in a job name or user neither run nor break the table, and links stay links."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dash import Dash, Input, Output, dcc, html

from gpuscope.bench.browser import console_errors, open_page, wait_until
from gpuscope.dashboard import html_table
from gpuscope.dashboard.server import DashboardServer

HOSTILE = (
    '<img src=x onerror="window.pwned=1">',
    "{window.pwned = 2}",
    "</td></tr></tbody></table><b id='escaped'>x</b>",
    "it's \"quoted\" & <dccLink href='/evil'>evil</dccLink>",
    "$x$ *not emphasis* `not code`",
)


def test_escape_leaves_no_markup_or_expression() -> None:
    for text in HOSTILE:
        escaped = html_table.escape(text)
        assert not set(escaped) & set("<>\"'{}"), escaped


@pytest.fixture(scope="module")
def page() -> Iterator[str]:
    app = Dash(__name__)
    app.layout = html.Div(
        [dcc.Location(id="url"), html.Div(id="page", children=html.Div(id="out", className="output"))]
    )

    @app.callback(Output("out", "children"), Input("url", "pathname"))
    def fill(_: str | None) -> Any:
        rows = [
            [html_table.link(text, f"/jobs/{i}", title=text), html_table.span(text, title=text)]
            for i, text in enumerate(HOSTILE)
        ]
        return html_table.table(["job", "user"], rows, id="hostile", numeric=[False, True])

    server = DashboardServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/"
    finally:
        server.stop()


def test_hostile_text_reads_as_text_in_the_browser(page: str, browser: Any) -> None:
    open_page(browser, page)
    table = wait_until(browser, lambda: browser.find_element("id", "hostile"), 10, "the table")
    rows = table.find_elements("css selector", "tbody tr")
    assert len(rows) == len(HOSTILE)
    for row, text in zip(rows, HOSTILE, strict=True):
        link, user = row.find_elements("css selector", "td")
        assert link.text == text.strip() and user.text == text.strip()
        assert user.find_element("css selector", "span").get_attribute("title") == text
        anchor = link.find_element("css selector", "a")
        assert anchor.get_attribute("title") == text
    assert browser.execute_script("return window.pwned") is None
    assert browser.find_elements("css selector", "#hostile img, #escaped") == []
    assert [td.get_attribute("class") for td in rows[0].find_elements("css selector", "td")] == ["", "num"]
    rows[1].find_element("css selector", "a").click()  # an in-app link: the address changes, the page stays
    wait_until(browser, lambda: browser.current_url.endswith("/jobs/1"), 10, "the link to be followed")
    assert console_errors(browser) == []
