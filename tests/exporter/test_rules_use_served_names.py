"""Every metric the shipped PromQL rules query is one the exporter (or, for stragglers, the collector)
really serves: the rules' unit tests feed series by hand, so a renamed family would pass them and never
fire in production."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscope.exporter.exposition import ExporterIdentity, Exposition
from gpuscope.exporter.sim import JobSchedule, SimJobs, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus" / "gpuscope-rules.yaml"
COLLECTOR_FAMILIES = {  # served by the collector's /metrics
    "gpuscope_straggler_slowdown_ratio",
    "gpuscope_node_health_jobs_running",
    "gpuscope_collector_database_state",
    "gpuscope_collector_database_free_bytes",
}


def test_every_queried_name_is_served() -> None:
    topology = build_topology(1, 8, 1)
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    now = next(t for t in range(1_790_000_000, 1_790_000_000 + 86_400, 600) if source.schedule.job_at(0, t))
    gpus, ports = source.read(now)
    first = gpus[0]
    gpus = (type(first)(first.gpu, True, first.values, first.links, {79: 1}), *gpus[1:])  # XIDs are rare
    jobs = SimJobs(topology[0], source.schedule).assign(tuple(r.gpu for r in gpus), now)
    snapshot = Snapshot(ts=now, gpus=gpus, ports=ports, jobs=jobs, driver_version=source.driver_version)
    body, _ = Exposition(ExporterIdentity("c", "r", "n", "sim", "t"), lambda: snapshot).render(None)
    served = set(re.findall(r"^(\w+)[{ ]", body.decode(), re.MULTILINE)) | COLLECTOR_FAMILIES
    queried = set(re.findall(r"\b(gpuscope_\w+)", RULES.read_text()))
    assert queried, "the rules query gpuscope's names"
    assert queried <= served, sorted(queried - served)
