"""Large tables as one HTML string in one dcc.Markdown, not one Dash component per cell.

Dash's renderer spends about 0.7 ms on every component it mounts: a 64-row, 13-column table of html.Td
took 0.7-0.9 s to appear in headless Chromium here, the same table as one Markdown 0.25 s (the page's
floor), so the jobs list took 1.3 s. Links stay in-app links: dcc.Markdown turns <dccLink/> into dcc.Link.

Every text is escaped here, quotes and braces too: dcc.Markdown hands HTML to a JSX parser, which would
evaluate `{...}` in a job name as an expression. Callers pass plain text and get safe markup back."""

from __future__ import annotations

from collections.abc import Sequence

from dash import dcc

# Characters with a meaning in HTML or JSX, as numeric entities (the JSX parser decodes them back).
_ENTITIES = {ord(c): f"&#{ord(c)};" for c in "&<>\"'{}"}


def escape(value: object) -> str:
    return str(value).translate(_ENTITIES)


def _attributes(attrs: dict[str, str | None]) -> str:
    return "".join(f' {name}="{escape(value)}"' for name, value in attrs.items() if value is not None)


def element(tag: str, content: str = "", **attrs: str | None) -> str:
    """<tag attrs>content</tag>; `content` is markup already (escape() text first). Python-safe attribute
    names: className, title, id."""
    return f"<{tag}{_attributes(attrs)}>{content}</{tag}>"


def span(text: object, title: str | None = None, className: str | None = None) -> str:
    return element("span", escape(text), title=title, className=className)


def link(text: object, href: str, title: str | None = None, className: str | None = None) -> str:
    """An in-app link (no page reload), as dcc.Link."""
    return element("dccLink", escape(text), href=href, title=title, className=className)


def table(header: Sequence[str], rows: Sequence[Sequence[str]], id: str, numeric: Sequence[bool]) -> dcc.Markdown:
    """`header` and `rows` are cells' markup (th and td content); `numeric` right-aligns a column."""

    def cells(tag: str, row: Sequence[str]) -> str:
        return "".join(
            element(tag, cell, className="num" if number else None) for cell, number in zip(row, numeric, strict=True)
        )

    head = element("thead", element("tr", cells("th", header)))
    body = element("tbody", "".join(element("tr", cells("td", row)) for row in rows))
    # One line: a blank line would end Markdown's HTML block half way through the table.
    markup = element("table", head + body, id=id, className="table html-table")
    return dcc.Markdown(markup, dangerously_allow_html=True, dedent=False, className="html-table-box")
