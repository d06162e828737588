"""The Reports page's section on what stragglers cost over its range: the GPU-hours jobs spent beyond
their normal pace (stragglers/reads.py says how an episode is reckoned), by cause and by the
jobs that lost most, each job a link to its page. The same figures as GET /api/v1/reports/stragglers."""

from __future__ import annotations

from dash import dcc, html

from gpuscope.dashboard.components import MUTED, job_href, table
from gpuscope.stragglers.cost import CostReport

JOBS_SHOWN = 10


def section(by_job: CostReport, by_cause: CostReport) -> html.Div:
    title = html.H3("GPU-hours lost to stragglers")
    if not by_job.rows:
        return html.Div([title, html.P("No straggler slowed a job in this range.", style={"color": MUTED})])
    causes = ", ".join(f"{row.key} {row.gpu_hours_lost:.1f}" for row in by_cause.rows)
    summary = (
        f"{by_job.gpu_hours_lost:.1f} GPU-hours lost in {by_job.episodes} episode"
        f"{'' if by_job.episodes == 1 else 's'} ({causes}): the time jobs ran beyond their normal pace,"
        " times the GPUs they held."
    )
    rows = [
        [dcc.Link(row.key, href=job_href(row.key)), row.episodes, f"{row.gpu_hours_lost:.2f}"]
        for row in by_job.rows[:JOBS_SHOWN]
        if row.key is not None
    ]
    more = len(by_job.rows) - JOBS_SHOWN
    return html.Div(
        [
            title,
            html.P(summary, id="reports-stragglers-summary"),
            table(["job", "episodes", "GPU-hours lost"], rows, id="reports-stragglers-table"),
            html.P(f"and {more} more jobs", style={"color": MUTED}) if more > 0 else None,
        ]
    )
