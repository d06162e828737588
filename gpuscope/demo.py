"""`gpuscope demo`: embedded PostgreSQL, collector, simulated exporters and dashboard in one process tree.

Everything binds 127.0.0.1. SIGINT or SIGTERM stops the parts in reverse order of start (exporters
flush what they hold first), the PostgreSQL child last, and removes the temporary data directory.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpuscope.collector.api.auth import token_or_generate
from gpuscope.collector.service import BackgroundServer
from gpuscope.collector_process import CollectorSettings
from gpuscope.collector_process import build as build_collector
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.signals import stop_on_signals
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.dashboard_process import build as build_dashboard
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimJobs, SimNodeSource, build_topology

log = logging.getLogger("gpuscope.demo")
HOST = "127.0.0.1"


@dataclass(frozen=True)
class DemoOptions:
    nodes: int = 16
    gpus_per_node: int = 8
    racks: int = 4
    seed: int = 42
    dashboard_port: int = 8050
    collector_port: int = 9410
    interval: float = 1.0
    backfill_minutes: float = 60.0
    data_dir: Path | None = None  # None: a temporary directory, removed at exit


def run_demo(options: DemoOptions) -> None:
    stop = stop_on_signals()
    with contextlib.ExitStack() as stack:
        data_dir = options.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscope-demo-")))
        pg = EmbeddedPostgres(data_dir)
        pg.start()  # first: its child is forked before any of our threads exist
        stack.callback(pg.stop)

        token = secrets.token_urlsafe(32)
        token_or_generate(None, data_dir, "admin-token")  # silences from the dashboard need it
        settings = CollectorSettings(
            listen=f"{HOST}:{options.collector_port}",
            data_dir=data_dir,
            admin_token_file=data_dir / "admin-token",
            # alerts: the shipped rules, kept and shown, sent nowhere (no notify config)
        )
        collector = BackgroundServer(build_collector(settings, pg.dsn, token), HOST, options.collector_port)
        collector.start()
        stack.callback(collector.stop)
        push_url = f"http://{HOST}:{collector.port}"

        exporters = _simulated_exporters(options, push_url, token)
        stack.callback(_stop_all, exporters)
        _backfill(exporters, minutes=options.backfill_minutes)
        for exporter in exporters:
            exporter.start()
        staged = _stage_a_fault(exporters)

        dashboard_settings = DashboardSettings(
            db=pg.dsn, listen=f"{HOST}:{options.dashboard_port}", collector_url=push_url
        )
        dashboard = stack.enter_context(build_dashboard(dashboard_settings))
        dashboard.start()
        stack.callback(dashboard.stop)

        gpus = options.nodes * options.gpus_per_node
        print(
            f"gpuscope demo: {gpus} simulated GPUs on {options.nodes} nodes in {options.racks} racks\n"
            f"  dashboard  http://{HOST}:{dashboard.port}\n"
            f"  collector  {push_url}/docs\n"
            f"  data       {data_dir}{'' if options.data_dir else ' (temporary)'}\n"
            f"  alerts     {push_url}/api/v1/alerts  (staged fault: {staged})\n"
            f"  admin      token for silences in {data_dir / 'admin-token'}\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        stop.wait()
        print("gpuscope demo: stopping...", flush=True)
    print("gpuscope demo: stopped.", flush=True)


def _stage_a_fault(exporters: list[NodeExporter]) -> str:
    """A fan fails on one GPU, so the demo shows an alert going pending and then firing."""
    exporter = exporters[min(3, len(exporters) - 1)]
    source = exporter.source
    assert isinstance(source, SimNodeSource)
    gpu = min(5, len(source.gpus) - 1)
    source.fail_cooling(gpu, 55.0)
    return f"GPU {gpu} on {exporter.config.node} runs hot; GpuOverTemperature fires after 2 minutes"


def _simulated_exporters(options: DemoOptions, push_url: str, token: str) -> list[NodeExporter]:
    topology = build_topology(options.nodes, options.gpus_per_node, options.racks, cluster="demo")
    schedule = JobSchedule(topology, options.seed)
    return [
        NodeExporter(
            SimNodeSource(node, schedule, options.seed),
            ExporterConfig(
                node.cluster,
                node.rack,
                node.name,
                interval=options.interval,
                push_url=push_url,
                token=token,
                push_interval=options.interval,  # the demo's dashboard is live to the second
            ),
            jobs=SimJobs(node, schedule),
        )
        for node in topology
    ]


def _backfill(exporters: list[NodeExporter], minutes: float, step: float = 15.0) -> None:
    """Simulated history, so the first page already shows jobs coming and going."""
    if minutes <= 0:
        return
    started = time.monotonic()
    now = time.time()
    for exporter in exporters:
        t = now - minutes * 60
        while t < now:
            exporter.sampler.sample_once(now=t)
            t += step
        assert exporter.pusher is not None
        if not exporter.pusher.flush(time.monotonic() + 30):
            raise RuntimeError("the collector did not accept the simulated history")
    log.info("backfilled %.0f minutes of history in %.1fs", minutes, time.monotonic() - started)


def _stop_all(exporters: list[NodeExporter]) -> None:
    threads = [threading.Thread(target=e.stop, daemon=True) for e in exporters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
