"""The straggler watch's part serves what the watch found (GET /api/v1/stragglers, the gauge on /metrics,
a job's `straggler_model`) in every collector, the watch itself only where it is asked to run."""

from __future__ import annotations

from fastapi.routing import APIRoute

from gpuscope.stragglers.part import stragglers_part


def test_what_the_watch_found_is_served_where_the_watch_does_not_run() -> None:
    for run_watch in (True, False):
        part = stragglers_part(5.0, run_watch=run_watch)
        routes = {
            (r.path, *sorted(r.methods)) for router in part.routers for r in router.routes if isinstance(r, APIRoute)
        }
        assert routes == {("/api/v1/stragglers", "GET")}
        assert part.metrics is not None
        assert [field.name for field in part.job_fields] == ["straggler_model"]
    assert [task.name for task in stragglers_part(5.0).leader_tasks] == ["straggler watch"]
    assert stragglers_part(5.0, run_watch=False).leader_tasks == ()
