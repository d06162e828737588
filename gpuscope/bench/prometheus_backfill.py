"""The bench telemetry into a Prometheus TSDB: OpenMetrics text, one hour per file, through promtool.

`promtool tsdb create-blocks-from openmetrics` (2.42) holds the whole file in memory and parses it once
per 2 h block window it spans, so each file covers one clock hour: it falls inside one window (one pass,
one block) and is about 500 MB for 1,024 GPUs. Prometheus merges the hourly blocks into larger ones
itself once it runs (prometheus_server.wait_compacted), as it does with the 2 h blocks of its own head;
promtool's --max-block-duration (accepted, though 2.42's --help does not list it) is not needed.

What promtool 2.42 does with text it dislikes, found by trying it: a sample older than the one before it
in the same series is dropped without a word (so lines are written series by series, in time order, and
the tests count what Prometheus holds), and a family's lines split by another family are accepted
although OpenMetrics forbids it (they are kept together here all the same).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from gpuscope.bench.prometheus_series import JOB_INFO, UP, exposed_metrics, gpu_labels, job_labels, label_text
from gpuscope.bench.telemetry import Telemetry

FILE_SPAN_S = 3600


@dataclass(frozen=True)
class BackfillFigures:
    samples: int
    series: int
    files: int
    text_bytes: int  # OpenMetrics written, all files together
    write_seconds: float  # making the text (the bench's own work, not Prometheus's)
    promtool_seconds: float  # promtool turning the text into blocks: the backfill proper


def backfill(telemetry: Telemetry, data_dir: Path, promtool: str = "promtool") -> BackfillFigures:
    """Writes every sample of `telemetry` as blocks into `data_dir` (a Prometheus --storage.tsdb.path).
    The text goes to a file next to `data_dir`, one hour at a time, removed once promtool has read it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    text = data_dir.with_name(data_dir.name + ".om")
    samples = text_bytes = files = 0
    write_s = promtool_s = 0.0
    gpu_texts = [label_text(gpu_labels(gpu)) for gpu in telemetry.gpus]  # built once, used every hour
    try:
        for lo, hi in hour_chunks(telemetry):
            started = time.perf_counter()
            with text.open("w", encoding="utf-8") as out:
                samples += write_openmetrics(telemetry, lo, hi, out, gpu_texts)
            write_s += time.perf_counter() - started
            text_bytes += text.stat().st_size
            files += 1
            started = time.perf_counter()
            run = subprocess.run(
                [promtool, "tsdb", "create-blocks-from", "openmetrics", "--quiet", str(text), str(data_dir)],
                capture_output=True,
                text=True,
                check=False,
            )
            promtool_s += time.perf_counter() - started
            if run.returncode:
                shutil.copy(text, text.with_suffix(".failed.om"))  # kept to look at
                raise RuntimeError(f"promtool failed on steps {lo}..{hi} ({run.returncode}): {run.stderr[-2000:]}")
    finally:
        text.unlink(missing_ok=True)
    series = len(telemetry.gpus) * (len(exposed_metrics()) + 1) + sum(len(job.gpus) for job in telemetry.jobs)
    return BackfillFigures(samples, series, files, text_bytes, round(write_s, 2), round(promtool_s, 2))


def hour_chunks(telemetry: Telemetry, span_s: int = FILE_SPAN_S) -> Iterator[tuple[int, int]]:
    """(lo, hi) step ranges, each inside one clock hour (span_s), covering every step."""
    lo = 0
    while lo < telemetry.steps:
        next_boundary = (telemetry.start + lo * telemetry.step_s) // span_s * span_s + span_s
        hi = min(telemetry.steps, int((next_boundary - telemetry.start + telemetry.step_s - 1) // telemetry.step_s))
        yield lo, hi
        lo = hi


def write_openmetrics(telemetry: Telemetry, lo: int, hi: int, out: TextIO, gpu_texts: list[str]) -> int:
    """Steps lo..hi of every series as OpenMetrics, each family's lines together and each series' samples
    in time order; returns the number of samples. Values are repr() of the float the exporter would
    expose (native value * catalog scale), so they come back from Prometheus bit for bit."""
    stamps = [str(int(t)) for t in telemetry.stamps(lo, hi)]  # whole seconds: start and step_s are
    values = telemetry.block(lo, hi)
    samples = 0
    for metric in exposed_metrics():
        out.write(f"# TYPE {metric.name} gauge\n")
        per_gpu = (values[metric.key] * metric.scale).T.tolist()  # one list of floats per GPU
        for labels, series in zip(gpu_texts, per_gpu, strict=True):
            out.write(_lines(metric.name + labels, map(repr, series), stamps))
        samples += len(stamps) * len(gpu_texts)
    out.write(f"# TYPE {UP} gauge\n")
    for labels in gpu_texts:
        out.write(_lines(UP + labels, ["1"] * len(stamps), stamps))  # the exporter writes the int 1
    samples += len(stamps) * len(gpu_texts)
    out.write(f"# TYPE {JOB_INFO} gauge\n")
    for job in telemetry.jobs:
        first, end = max(job.first_step, lo), min(job.end_step, hi)
        for position in job.gpus if first < end else ():
            held = stamps[first - lo : end - lo]
            out.write(_lines(JOB_INFO + label_text(job_labels(telemetry.gpus[position], job)), ["1"] * len(held), held))
            samples += len(held)
    out.write("# EOF\n")
    return samples


def _lines(prefix: str, values: Iterable[str], stamps: list[str]) -> str:
    return "".join([f"{prefix} {value} {stamp}\n" for value, stamp in zip(values, stamps, strict=True)])
