"""The dashboard's pages, one module each: match(pathname) -> URL parts or None, layout(ctx, search,
**parts), register(app, ctx) for its callbacks. The first match wins."""

from gpuscope.dashboard.pages import alerts, health, heatmap, job, jobs, node, overview, power, reports, search

PAGES = (overview, heatmap, power, jobs, job, node, health, reports, alerts, search)
