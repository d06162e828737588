"""`gpuscope exporter`: picks the telemetry source, then runs one NodeExporter until SIGINT/SIGTERM."""

from __future__ import annotations

import argparse
import logging

from exporter.jobs.base import JobSource
from exporter.jobs.select import open_jobs
from exporter.node_exporter import ExporterConfig, NodeExporter
from exporter.sim import JobSchedule, NodeSpec, SimJobs, SimNodeSource
from exporter.sources.base import BackendUnavailable, Source
from exporter.sources.select import open_source
from gpuscope.signals import stop_on_signals
from gpuscope.tokens import read_token_file

log = logging.getLogger("gpuscope.exporter")
SIM_IB_PORTS = 8


def make_source(args: argparse.Namespace) -> Source:
    if args.backend == "sim":
        node = NodeSpec(args.cluster, args.rack, args.node, index=0, gpus=args.sim_gpus, ib_ports=SIM_IB_PORTS)
        return SimNodeSource(node, JobSchedule((node,), args.sim_seed), args.sim_seed)
    try:
        return open_source(args.backend, ib_root=args.ib_root)
    except BackendUnavailable as exc:
        raise RuntimeError(f"--backend {args.backend}: {exc}") from None


def make_jobs(args: argparse.Namespace, source: Source) -> JobSource | None:
    if args.backend == "sim" and args.jobs != "none":
        assert isinstance(source, SimNodeSource)
        return SimJobs(source.node, source.schedule)
    return open_jobs(args.jobs, source, args.slurm_mapping_dir)


def run_exporter(args: argparse.Namespace) -> None:
    if args.push and not args.token_file:
        raise ValueError("--push needs --token-file (the collector's bearer token)")
    token = read_token_file(args.token_file) if args.token_file else None
    source = make_source(args)
    config = ExporterConfig(
        cluster=args.cluster,
        rack=args.rack,
        node=args.node,
        interval=args.interval,
        listen=args.listen,
        push_url=args.push,
        push_interval=args.push_interval,
        token=token,
        dcgm_compat=args.dcgm_compat,
        spool_dir=args.spool_dir,
    )
    exporter = NodeExporter(source, config, jobs=make_jobs(args, source))
    stop = stop_on_signals()
    exporter.start()
    host, port = exporter.address or ("-", 0)
    log.info(
        "exporter (%s) serving http://%s:%d/metrics%s",
        source.name,
        host,
        port,
        f", pushing to {args.push}" if args.push else "",
    )
    stop.wait()
    exporter.stop()
