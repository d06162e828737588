"""The page for a job or node the telemetry does not know (a mistyped or expired address): one message
and the way back, instead of a page of panels that each say "nothing"."""

from __future__ import annotations

from dash import dcc, html

from gpuscope.dashboard.components import MUTED, banner


def not_found(title: str, message: str, back_href: str, back_label: str) -> html.Div:
    return html.Div(
        [
            html.H2(title),
            banner(message, "empty"),
            html.P(
                [
                    dcc.Link(f"← {back_label}", href=back_href, id="back-link"),
                    html.Span(", or search for it in the box above.", style={"color": MUTED}),
                ]
            ),
        ],
        id="not-found",
    )
