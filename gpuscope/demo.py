"""`gpuscope demo`: embedded PostgreSQL, collector, simulated exporters and dashboard in one process tree.

The simulated cluster runs its everyday jobs, back-filled an hour into the past, plus a staged story
(demo_scenario.py): a straggler in a training job, an idle job, an XID, a flapping link, a rack near
its power budget.

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
from gpuscope.collector_process import database as collector_database
from gpuscope.core.signals import stop_on_signals
from gpuscope.dashboard_process import DashboardSettings
from gpuscope.dashboard_process import build as build_dashboard
from gpuscope.demo_scenario import Scenario, rack_budgets_kw, stage
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimJobs, SimNodeSource, build_topology

log = logging.getLogger("gpuscope.demo")
HOST = "127.0.0.1"
CLUSTER = "demo"
DENSE_HISTORY_S = 30 * 60


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
    staged: bool = True  # the staged story (demo_scenario.py) on top of the everyday jobs
    data_dir: Path | None = None  # None: a temporary directory, removed at exit


def run_demo(options: DemoOptions) -> None:
    stop = stop_on_signals()
    with contextlib.ExitStack() as stack:
        data_dir = options.data_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpuscope-demo-")))
        token = secrets.token_urlsafe(32)
        token_or_generate(None, data_dir, "admin-token")  # silences from the dashboard need it
        # Usage reports priced as a site would (docs/reports.md): the simulated GPUs are H100s.
        reports = data_dir / "reports.yaml"
        reports.write_text("currency: EUR\nprices:\n  - {model: '*H100*', per_gpu_hour: 2.50}\ngrid_g_per_kwh: 350\n")
        # The staged rack's budget, for the dashboard's power page and the collector's rack power alert.
        budgets = data_dir / "rack-budgets.yaml"
        topology = build_topology(options.nodes, options.gpus_per_node, options.racks, cluster=CLUSTER)
        staged = rack_budgets_kw(topology) if options.staged else {}
        budgets.write_text("".join(f"{rack}: {kw:g}\n" for rack, kw in staged.items()) or "{}\n")
        settings = CollectorSettings(
            listen=f"{HOST}:{options.collector_port}",
            data_dir=data_dir,
            db=None,  # always the embedded server, whatever GPUSCOPE_COLLECTOR_DB says
            db_password_file=None,
            admin_token_file=data_dir / "admin-token",
            reports_config=reports,
            rack_budgets=budgets,
            # alerts: the shipped rules, kept and shown, sent nowhere (no notify config)
        )
        # The embedded server, supervised, as under `gpuscope collector`; before any thread of ours starts,
        # so that its child is forked from a process with one thread.
        db = stack.enter_context(collector_database(settings))
        collector = BackgroundServer(build_collector(settings, db.dsn, token, db.status), HOST, options.collector_port)
        collector.start()
        stack.callback(collector.stop)
        push_url = f"http://{HOST}:{collector.port}"

        live_from = time.time()
        exporters, scenario = _simulated_cluster(options, push_url, token, live_from)
        stack.callback(_stop_all, exporters)
        _backfill(exporters, live_from, options.backfill_minutes, options.interval)
        for exporter in exporters:
            exporter.start()

        dashboard_settings = DashboardSettings(
            db=db.dsn,
            listen=f"{HOST}:{options.dashboard_port}",
            collector_url=push_url,
            rack_budgets_file=budgets,
            reports_config=reports,
        )
        dashboard = stack.enter_context(build_dashboard(dashboard_settings))
        dashboard.start()
        stack.callback(dashboard.stop)

        gpus = options.nodes * options.gpus_per_node
        site = f"http://{HOST}:{dashboard.port}"
        story = "".join(f"    - {event}\n" for event in scenario.events)
        print(
            f"gpuscope demo: {gpus} simulated GPUs on {options.nodes} nodes in {options.racks} racks\n"
            f"  dashboard  {site}\n"
            f"  alerts     {site}/alerts\n"
            f"  reports    {site}/reports  (usage accounting: from the first settled minutes on)\n"
            f"  collector  {push_url}/docs  (the HTTP API)\n"
            f"  data       {data_dir}{'' if options.data_dir else ' (temporary)'}\n"
            f"  admin      token for silences in {data_dir / 'admin-token'}\n"
            + (f"  staged in the first minutes:\n{story}" if story else "")
            + "Press Ctrl-C to stop.",
            flush=True,
        )
        stop.wait()
        print("gpuscope demo: stopping...", flush=True)
    print("gpuscope demo: stopped.", flush=True)


def _simulated_cluster(
    options: DemoOptions, push_url: str, token: str, live_from: float
) -> tuple[list[NodeExporter], Scenario]:
    topology = build_topology(options.nodes, options.gpus_per_node, options.racks, cluster=CLUSTER)
    schedule = JobSchedule(topology, options.seed)
    sources = [SimNodeSource(node, schedule, options.seed) for node in topology]
    scenario = stage(topology, schedule, sources, live_from) if options.staged else Scenario()
    exporters = [
        NodeExporter(
            source,
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
        for node, source in zip(topology, sources, strict=True)
    ]
    return exporters, scenario


def _backfill(exporters: list[NodeExporter], until: float, minutes: float, interval: float) -> None:
    """Simulated history up to `until`, so the first page already shows jobs coming and going. The last
    half hour every 5 s, as the straggler watch samples, so the staged training job's baselines are
    learnt from history as from live data; older history every 15 s, which is quicker to make. Then
    the seconds that took, at the live interval, until history reaches the clock: live sampling must
    begin where history ends, or the join reads as an outage across every GPU."""
    if minutes <= 0:
        return
    started = time.monotonic()
    dense_from = until - DENSE_HISTORY_S
    times = []
    t = until - minutes * 60
    while t < until:
        times.append(t)
        t += 5.0 if t >= dense_from else 15.0
    _sample_at(exporters, times)
    while (now := time.time()) - t > interval:
        times = []
        while t < now:
            times.append(t)
            t += interval
        _sample_at(exporters, times)
    log.info("backfilled %.0f minutes of history in %.1fs", minutes, time.monotonic() - started)


def _sample_at(exporters: list[NodeExporter], times: list[float]) -> None:
    for exporter in exporters:
        for t in times:
            exporter.sampler.sample_once(now=t)
        assert exporter.pusher is not None
        if not exporter.pusher.flush(time.monotonic() + 30):
            raise RuntimeError("the collector did not accept the simulated history")


def _stop_all(exporters: list[NodeExporter]) -> None:
    threads = [threading.Thread(target=e.stop, daemon=True) for e in exporters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
