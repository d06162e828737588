"""The exporter process: its settings, build() that picks the telemetry source and job attribution and
makes one NodeExporter, and run() that serves it until SIGINT/SIGTERM."""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuscope.core.settings_flags import check_bounds, flag
from gpuscope.core.signals import stop_on_signals
from gpuscope.core.tokens import read_token_file
from gpuscope.exporter.exposition import NameSets
from gpuscope.exporter.jobs.base import JobSource
from gpuscope.exporter.jobs.kubernetes import DEFAULT_SOCKET
from gpuscope.exporter.jobs.select import KUBELET_PODS_URL, KubernetesOptions, PodMetadata, open_jobs
from gpuscope.exporter.jobs.slurm import configured_mapping_dir
from gpuscope.exporter.node_exporter import (
    DEFAULT_INTERVAL_S,
    DEFAULT_PUSH_INTERVAL_S,
    ExporterConfig,
    NodeExporter,
)
from gpuscope.exporter.sim import JobSchedule, NodeSpec, SimJobs, SimNodeSource
from gpuscope.exporter.sources.base import BackendUnavailable, Source
from gpuscope.exporter.sources.select import open_source

log = logging.getLogger(__name__)
SIM_IB_PORTS = 8
Backend = Literal["auto", "nvml", "amdsmi", "sim"]
Jobs = Literal["auto", "slurm", "k8s", "none"]


@dataclass(frozen=True)
class ExporterSettings:
    """`gpuscope exporter`'s settings; each field is one option (gpuscope/core/settings_flags.py)."""

    backend: Backend = field(
        default="auto",
        metadata=flag("what reads the GPUs (auto: NVML, else amdsmi; sim: a simulated node, no GPU needed)"),
    )
    # Prometheus scrapes every node: the field's convention is all interfaces, port 9400 (as dcgm-exporter).
    listen: str | None = field(default=":9400", metadata=flag("HOST:PORT for /metrics (default :9400, all interfaces)"))
    push: str | None = field(
        default=None, metadata=flag("collector base URL, e.g. http://collector:9410", metavar="URL")
    )
    interval: float = field(default=DEFAULT_INTERVAL_S, metadata=flag("sampling interval in seconds", gt=0))
    push_interval: float = field(
        default=DEFAULT_PUSH_INTERVAL_S,
        metadata=flag("send the snapshots of this many seconds together (0: each as soon as it is taken)", ge=0),
    )
    node: str = field(default=socket.gethostname(), metadata=flag("this node's name", default_text="the host name"))
    rack: str = field(default="default", metadata=flag("the rack it stands in, for power per rack"))
    cluster: str = field(default="default", metadata=flag("the cluster it belongs to"))
    token_file: Path | None = field(default=None, metadata=flag("file holding the collector's bearer token"))
    spool_dir: Path | None = field(default=None, metadata=flag("keep unsent batches here while the collector is away"))
    jobs: Jobs = field(
        default="auto",
        metadata=flag(
            "job attribution (auto: Slurm if the node has it, else Kubernetes if the kubelet's socket is there)"
        ),
    )
    slurm_mapping_dir: Path | None = field(
        default=None,  # None: the prolog's own setting (configured_mapping_dir)
        metadata=flag(
            "per-GPU job files written by deploy/slurm/prolog.sh (default: map_dir in gpuscope.conf beside"
            " slurm.conf, as the prolog reads it, else /run/gpuscope/slurm)"
        ),
    )
    pod_resources_socket: Path = field(
        default=DEFAULT_SOCKET, metadata=flag("the kubelet's pod-resources API (Kubernetes)")
    )
    pod_metadata: PodMetadata = field(
        default="auto",
        metadata=flag(
            "where pod labels (which pods make one job) come from; auto: the API server in a pod, else the kubelet"
        ),
    )
    kubelet_pods_url: str = field(
        default=KUBELET_PODS_URL, metadata=flag("the kubelet's read-only pod list, for --pod-metadata kubelet")
    )
    dcgm_compat: bool = field(
        default=False, metadata=flag("serve dcgm-exporter's metric names too (NVIDIA GPUs; docs/)")
    )
    amd_compat: bool = field(
        default=False, metadata=flag("serve AMD device-metrics-exporter's metric names too (AMD GPUs)")
    )
    compat_only: bool = field(
        default=False, metadata=flag("serve only the compatible names chosen, not gpuscope's own")
    )
    # where the InfiniBand ports are read: tests point it at a fake tree
    ib_root: Path = field(
        default=Path("/sys/class/infiniband"), metadata=flag("sysfs tree of the InfiniBand ports", hidden=True)
    )
    sim_seed: int = field(default=0, metadata=flag("seed for --backend sim"))
    sim_gpus: int = field(default=8, metadata=flag("GPUs for --backend sim", ge=1))

    def __post_init__(self) -> None:
        check_bounds(self)  # settings made in code too: the demo, the tests


def build(settings: ExporterSettings) -> NodeExporter:
    """The exporter for these settings, not yet started; the token file is read now."""
    if settings.push and not settings.token_file:
        raise ValueError("--push needs --token-file (the collector's bearer token)")
    token = read_token_file(settings.token_file) if settings.token_file else None
    names = NameSets(native=not settings.compat_only, dcgm=settings.dcgm_compat, amd=settings.amd_compat)
    source = make_source(settings)
    _check_names_fit(names, source)
    config = ExporterConfig(
        cluster=settings.cluster,
        rack=settings.rack,
        node=settings.node,
        interval=settings.interval,
        listen=settings.listen,
        push_url=settings.push,
        push_interval=settings.push_interval,
        token=token,
        names=names,
        spool_dir=settings.spool_dir,
    )
    return NodeExporter(source, config, jobs=make_jobs(settings, source))


def _check_names_fit(names: NameSets, source: Source) -> None:
    """dcgm-exporter's names describe NVIDIA GPUs and AMD's AMD GPUs: serving one vendor's GPUs under the
    other's names would put AMD GPUs in NVIDIA dashboards (device="nvidia0")."""
    parts = set(source.name.split("+"))
    if names.dcgm and "amdsmi" in parts:
        raise ValueError("--dcgm-compat serves NVIDIA's names, and this node's GPUs are AMD's: use --amd-compat")
    if names.amd and "nvml" in parts:
        raise ValueError("--amd-compat serves AMD's names, and this node's GPUs are NVIDIA's: use --dcgm-compat")


def make_source(settings: ExporterSettings) -> Source:
    if settings.backend == "sim":
        node = NodeSpec(
            settings.cluster, settings.rack, settings.node, index=0, gpus=settings.sim_gpus, ib_ports=SIM_IB_PORTS
        )
        return SimNodeSource(node, JobSchedule((node,), settings.sim_seed), settings.sim_seed)
    try:
        return open_source(settings.backend, ib_root=settings.ib_root)
    except BackendUnavailable as exc:
        raise RuntimeError(f"--backend {settings.backend}: {exc}") from None


def make_jobs(settings: ExporterSettings, source: Source) -> JobSource | None:
    kubernetes = KubernetesOptions(
        node=settings.node,
        interval=settings.interval,
        socket=settings.pod_resources_socket,
        pod_metadata=settings.pod_metadata,
        kubelet_pods_url=settings.kubelet_pods_url,
    )
    if settings.backend == "sim" and settings.jobs in ("auto", "slurm"):
        # the simulator's own schedule; `--jobs k8s` attributes its GPUs through a (test) kubelet instead
        assert isinstance(source, SimNodeSource)
        return SimJobs(source.node, source.schedule)
    mapping_dir = settings.slurm_mapping_dir or configured_mapping_dir()
    return open_jobs(settings.jobs, source, mapping_dir, kubernetes=kubernetes)


def run(settings: ExporterSettings) -> None:
    exporter = build(settings)
    stop = stop_on_signals()
    exporter.start()
    host, port = exporter.address or ("-", 0)
    log.info(
        "exporter (%s) serving http://%s:%d/metrics%s",
        exporter.source.name,
        host,
        port,
        f", pushing to {settings.push}" if settings.push else "",
    )
    stop.wait()
    exporter.stop()
