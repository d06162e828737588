"""A seeded, deterministic simulated GPU cluster, shared by the demo, the tests and the benchmarks."""

from gpuscope.exporter.sim.jobs import JobRun, JobSchedule
from gpuscope.exporter.sim.node import SimJobs, SimNodeSource
from gpuscope.exporter.sim.topology import NodeSpec, build_topology

__all__ = ["JobRun", "JobSchedule", "NodeSpec", "SimJobs", "SimNodeSource", "build_topology"]
