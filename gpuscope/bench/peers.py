"""`gpuscope bench peers`: gpuscope beside a real Prometheus (Debian's 2.42), on one machine in one run.

The same telemetry (bench/telemetry.py: 1,024 GPUs x 24 h at 10 s, the six metrics the dashboard draws
plus `up`, and the jobs) is stored both ways: in gpuscope's store as ingest and maintenance leave it
(bench/peers_store.py), and in a Prometheus TSDB backfilled with `promtool tsdb create-blocks-from
openmetrics` from the series a scrape of gpuscope's exporter would give, then compacted by Prometheus
itself (bench/prometheus_*.py). The backfill is the faithful route for a day of history: remote write
only takes samples newer than the head's, so it serves the ingest figure instead, on a fresh server.

The same five questions go to both over HTTP, answers decoded and checked against the telemetry: the
6 h utilisation heatmap at 1-minute buckets, power per rack over 24 h (at the bucket our API picks for a
day, given to PromQL as its step), one job's utilisation and power over its life, the ten hottest GPUs
now, one GPU's utilisation over the day at 1 minute (a node or GPU page). Prometheus answers raw PromQL
and, for the heatmap, rack power and one GPU, recording rules too (as operators put behind dashboards;
our rollups are their counterpart); each ratio is against the faster of the two.

Bytes per GPU-day: Prometheus's blocks after compaction; ours as the database's growth on plain
PostgreSQL, and on TimescaleDB's columnstore where the test build runs (bench/peers_timescale.py).
Ingest: samples/s each takes with the load generator on the same machine (ours: `bench ingest`'s run
through the ingest API, rows/s times the values a row carries; Prometheus: its remote-write receiver).
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuscope.bench import ingest, peers_store, peers_timescale
from gpuscope.bench import prometheus_peer as prometheus
from gpuscope.bench.running_collector import running_collector
from gpuscope.bench.telemetry import JobSpan, Telemetry, make_telemetry
from gpuscope.collector.query.timerange import TimeRange, bucket_for
from gpuscope.collector.store.migrate import migrate
from gpuscope.core.embedded_pg import throwaway_postgres

RUNS = 20
REMOTE_WRITE_CONNECTIONS = 200  # Prometheus 2.42's max_shards for one remote-write queue


def run(
    gpus: int = 1024,
    hours: float = 24,
    runs: int = RUNS,
    ingest_nodes: int = ingest.NODES,
    ingest_batches: int = ingest.BATCHES_PER_NODE,
    compact: bool = True,
) -> dict[str, Any]:
    telemetry = make_telemetry(gpus=gpus, hours=hours)
    job = _job(telemetry)
    with tempfile.TemporaryDirectory(prefix="gpuscope-bench-peers-") as tmp:
        work = Path(tmp)
        work.chmod(0o711)  # as root, PostgreSQL runs as 'postgres' and must pass through
        steps = (_step(telemetry.start, telemetry.end), _step(*job_range(telemetry, job)))
        ours, plain_bytes = _gpuscope(telemetry, job, runs, work, steps)
        theirs, prometheus_figures = _prometheus(telemetry, job, runs, work / "prometheus", steps, compact)
        ingested = ingest.run(nodes=ingest_nodes, batches_per_node=ingest_batches)
        remote = _remote_write(work / "remote-write", ingest_nodes, ingest_batches)
    why_no_timescale = peers_timescale.unavailable()
    timescale_bytes, timescale_gpus = (None, 0) if why_no_timescale else peers_timescale.bytes_per_gpu_day(telemetry)
    figures: dict[str, Any] = {
        "gpus": gpus,
        "hours": hours,
        "runs": runs,
        "job": f"{job.job_id} ({len(job.gpus)} GPUs)",
    }
    figures |= {"rack_power_step_s": steps[0], "job_step_s": steps[1]}
    ratios, raw_ratios = {}, {}
    for name, answer in ours.items():
        best = min(theirs[name].values(), key=lambda a: a.p95_ms)
        ratios[name] = answer.p95 / best.p95_ms
        raw_ratios[name] = answer.p95 / theirs[name]["raw"].p95_ms
        figures[f"{name}_gpuscope_ms"] = [round(answer.p50, 1), round(answer.p95, 1)]
        for variant, theirs_answer in theirs[name].items():
            figures[f"{name}_prometheus_{variant}_ms"] = [theirs_answer.p50_ms, theirs_answer.p95_ms]
        figures[f"{name}_ratio"] = round(ratios[name], 3)
        figures[f"{name}_answers_right"] = answer.correct and all(a.ok for a in theirs[name].values())
    figures["worst_latency_ratio"] = round(max(ratios.values()), 3)  # against recording rules where they exist
    figures["worst_latency_ratio_raw_promql"] = round(max(raw_ratios.values()), 3)
    ours_bytes = timescale_bytes if timescale_bytes is not None else plain_bytes
    figures |= {
        "gpuscope_bytes_per_gpu_day": round(ours_bytes),
        "gpuscope_bytes_basis": "timescaledb columnstore" if timescale_bytes is not None else "plain postgresql",
        "gpuscope_plain_bytes_per_gpu_day": round(plain_bytes),
        "gpuscope_timescaledb_bytes_per_gpu_day": None if timescale_bytes is None else round(timescale_bytes),
        "timescaledb_gpus_loaded": timescale_gpus,
        "timescaledb_unavailable": why_no_timescale,
        "prometheus_bytes_per_gpu_day": prometheus_figures["bytes_per_gpu_day"],
        "prometheus_bytes_per_sample": prometheus_figures["bytes_per_sample"],
        "prometheus_blocks": prometheus_figures["blocks"],
        "bytes_ratio": round(ours_bytes / prometheus_figures["bytes_per_gpu_day"], 2),
        "plain_bytes_ratio": round(plain_bytes / prometheus_figures["bytes_per_gpu_day"], 2),
        "gpuscope_rows_per_s": ingested["rows_per_s"],
        "gpuscope_samples_per_row": ingested["samples_per_row"],
        "gpuscope_samples_per_s": round(ingested["rows_per_s"] * ingested["samples_per_row"]),
        "prometheus_samples_per_s": remote["samples_per_s"],
        "prometheus_samples_per_request": remote["samples_per_request"],
        "prometheus_retried_requests": remote["retried"],
        "all_answers_right": all(figures[f"{name}_answers_right"] for name in ours),
    }
    return figures


def _job(telemetry: Telemetry) -> JobSpan:
    """The longest job that ended within the range (a researcher asks after a finished run)."""
    ended = [j for j in telemetry.jobs if j.end_step < telemetry.steps] or list(telemetry.jobs)
    return max(ended, key=lambda j: (len(j.gpus), j.end_step - j.first_step))


def _gpuscope(
    telemetry: Telemetry, job: JobSpan, runs: int, work: Path, steps: tuple[int, int]
) -> tuple[dict[str, peers_store.Answer], float]:
    with throwaway_postgres("gpuscope-bench-peers-") as pg:
        migrate(pg.dsn)
        empty = peers_store.database_bytes(pg.dsn)
        peers_store.load(pg.dsn, telemetry)
        plain_bytes = (peers_store.database_bytes(pg.dsn) - empty) / (len(telemetry.gpus) * _days(telemetry))
        with running_collector(pg.dsn, work) as collector:
            questions = peers_store.Questions(collector.url, telemetry, runs)
            try:
                answers = {
                    "heatmap": questions.heatmap(),
                    "rack_power": questions.rack_power(steps[0]),
                    "job": questions.job(job.job_id, steps[1]),
                    "hottest": questions.hottest(),
                    "one_gpu": questions.one_gpu(prometheus.page_gpu(telemetry)),
                }
            finally:
                questions.close()
    return answers, plain_bytes


def _prometheus(
    telemetry: Telemetry, job: JobSpan, runs: int, data: Path, steps: tuple[int, int], compact: bool
) -> tuple[dict[str, dict[str, prometheus.Answer]], dict[str, Any]]:
    rack_step, job_step = steps
    filled = prometheus.backfill(telemetry, data)
    answers: dict[str, dict[str, prometheus.Answer]] = {}
    with prometheus.PrometheusServer(data) as server:
        if compact:
            prometheus.wait_compacted(server)
        storage = prometheus.storage_figures(telemetry, data, filled.samples)
        for question in prometheus.all_questions(telemetry, rack_step, job, job_step_s=job_step):
            answers.setdefault(question.name, {})["raw"] = prometheus.ask(server.port, question, runs)
        prometheus.add_recording_rules(server, telemetry, data.parent)
        if compact:
            prometheus.wait_compacted(server)  # the rules' blocks merged in, as a server would have them
        evaluations = prometheus.rule_evaluations(server.port, telemetry)
        for question in prometheus.all_questions(telemetry, rack_step, job, evaluations, job_step):
            if question.variant != "rules":
                continue
            answers[question.name]["rules"] = prometheus.ask(server.port, question, runs)
    return answers, {
        "bytes_per_gpu_day": storage.bytes_per_gpu_day,
        "bytes_per_sample": storage.bytes_per_sample,
        "blocks": storage.blocks,
    }


def _remote_write(data: Path, nodes: int, batches: int) -> dict[str, Any]:
    bodies = prometheus.remote_write_bodies(nodes, batches)
    with prometheus.PrometheusServer(data) as server:
        samples, seconds, failures = prometheus.remote_write_rate(server.port, bodies, REMOTE_WRITE_CONNECTIONS)
    per_request = sum(n for node in bodies for _, n in node) / sum(len(node) for node in bodies)
    return {"samples_per_s": round(samples / seconds), "samples_per_request": round(per_request), "retried": failures}


def job_range(telemetry: Telemetry, job: JobSpan) -> tuple[float, float]:
    return telemetry.start + job.first_step * telemetry.step_s, telemetry.start + job.end_step * telemetry.step_s


def _step(start: float, end: float) -> int:
    """The bucket our API picks for a chart of the range (bucket_for), at least a minute: whole minutes,
    so that our rollups and PromQL's steps cut the same buckets."""
    chosen = bucket_for(TimeRange(datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC)))
    return max(60, -(-chosen // 60) * 60)


def _days(telemetry: Telemetry) -> float:
    return telemetry.steps * telemetry.step_s / 86400
