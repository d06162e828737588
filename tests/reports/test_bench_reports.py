"""`gpuscope bench reports` at a small size, so the bench cannot rot: its month loads, every report answers
and the hour's accounting runs over the fleet's minute rollups."""

from __future__ import annotations

from gpuscope.bench.reports import DIMENSIONS, measure


def test_the_reports_bench_runs_small(dsn: str) -> None:
    result = measure(dsn, gpus=160, days=2)
    assert result["gpus"] == 160 and result["usage_rows"] > result["jobs"] > 20
    assert set(result["report_s_p95"]) == set(DIMENSIONS)
    assert 0 < result["report_s_worst_p95"] < 5 and result["usage_hour_s"] > 0
    # Every GPU held the whole hour but one node in 16, whose job started 20 minutes in.
    assert abs(result["usage_hour_gpu_hours"] - (160 - 8 * 20 / 60)) < 0.1
