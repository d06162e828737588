"""The bench telemetry as a Prometheus that scrapes gpuscope's exporters would hold it: names, scales, labels.

Names and scales come from the exporter's catalog (what /metrics serves). Labels are the exporter's own
(`gpu`, `uuid`; `job_id`, `user` on gpuscope_gpu_job_info) plus what the shipped scrape configuration
(deploy/prometheus/prometheus.yml) adds: `job` (its job name), `instance` (host:port of the exporter,
on its default port 9400) and the file_sd target labels `cluster` and `rack`, with `node` as a further
target label a site adds. Prometheus's own per-target series (up, scrape_duration_seconds,
scrape_samples_scraped, ...) are left out: they are the scraper's, one per node rather than per GPU, and
gpuscope's store has no counterpart to them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from gpuscope.bench.telemetry import METRICS, GpuId, JobSpan
from gpuscope.exporter.catalog import load_catalog
from gpuscope.exporter.textformat import label_block

SCRAPE_JOB = "gpuscope-exporter"  # the job name in deploy/prometheus/prometheus.yml
EXPORTER_PORT = 9400  # the exporter's default --listen (as dcgm-exporter's)
UP = "gpuscope_gpu_up"  # 1 per GPU per sample: the store keeps an `up` column
JOB_INFO = "gpuscope_gpu_job_info"  # 1 per sample while a job holds the GPU, as the exporter serves it


@dataclass(frozen=True)
class Exposed:
    key: str  # the telemetry's (and the store's) name
    name: str  # the name on /metrics
    scale: float  # native value * scale = exposed value


@cache
def exposed_metrics() -> tuple[Exposed, ...]:
    """The telemetry's metrics under their /metrics names, in METRICS order."""
    specs = {spec.key: spec for spec in load_catalog()}
    return tuple(Exposed(key, specs[key].prom_name, specs[key].prom_scale) for key in METRICS)


def exposed(key: str) -> Exposed:
    return next(metric for metric in exposed_metrics() if metric.key == key)


def gpu_labels(gpu: GpuId) -> dict[str, str]:
    """A GPU's labels after the scrape: the exporter's and the target's."""
    return {
        "cluster": gpu.cluster,
        "rack": gpu.rack,
        "node": gpu.node,
        "instance": f"{gpu.node}:{EXPORTER_PORT}",
        "job": SCRAPE_JOB,
        "gpu": str(gpu.index),
        "uuid": gpu.uuid,
    }


def job_labels(gpu: GpuId, job: JobSpan) -> dict[str, str]:
    return {**gpu_labels(gpu), "job_id": job.job_id, "user": job.user}


def label_text(labels: dict[str, str]) -> str:
    """'{a="x",b="y"}', names sorted, values escaped as the exporter escapes them."""
    names = sorted(labels)
    return label_block(names, [labels[name] for name in names])
