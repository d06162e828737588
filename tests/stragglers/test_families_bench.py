"""The per-family straggler score: independent physics (gpuscope/bench/workloads) fed as the watch feeds
the detector, and scored against each family's ground truth."""

from __future__ import annotations

from gpuscope.bench import stragglers_families as families
from gpuscope.bench.workloads import generate


def test_a_clear_fault_of_an_independent_family_is_found_at_its_place() -> None:
    # The first yield_dp seed (among those looked at while revising) with a GPU fault of 50%.
    case = next(
        c
        for c in (generate("yield_dp", seed) for seed in families.TUNING)
        if c.faults and c.faults[0].target_slowdown == 0.5 and c.faults[0].gpu is not None
    )
    fault = case.faults[0]
    found = [s for s in families.detect(case) if families._overlaps(s, fault)]
    assert found and (found[0].node, found[0].gpu) == (fault.node, fault.gpu)
    assert abs(found[0].slowdown - fault.true_slowdown) <= 0.25 * fault.true_slowdown


def test_a_score_has_every_figure_the_targets_name() -> None:
    score = families.score_family("grad_accum", range(0, 2))
    for key in (
        "precision",
        "recall_ge10",
        "recall_5pct",
        "latency_p95_s",
        "slowdown_error_median",
        "false_alerts_per_1000_job_hours",
    ):
        assert key in score
    assert 0 <= score["precision"] <= 1
