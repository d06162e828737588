"""A seeded, deterministic simulated GPU cluster, shared by the demo, the tests and the benchmarks."""

from exporter.sim.jobs import JobRun, JobSchedule
from exporter.sim.node import SimJobs, SimNodeSource
from exporter.sim.topology import NodeSpec, build_topology

__all__ = ["JobRun", "JobSchedule", "NodeSpec", "SimJobs", "SimNodeSource", "build_topology"]
