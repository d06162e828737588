"""The Prometheus side of `gpuscope bench peers`: the same telemetry in a real Prometheus TSDB, the same
questions asked of it, and its ingest rate over remote write.

The parts, in the order a run uses them:
- prometheus_backfill.backfill: the telemetry as OpenMetrics, into blocks with promtool (timed);
- prometheus_server.PrometheusServer, wait_compacted, tsdb_bytes: the server over those blocks, its
  own compaction, the size of what it keeps (storage_figures below);
- prometheus_rules: two recording rules backfilled with promtool (add_recording_rules below);
- prometheus_questions: the five questions in PromQL, raw and from the rules, timed over HTTP
  (prometheus_http) and checked against the telemetry (prometheus_answers);
- prometheus_remote_write: remote-write request bodies and the ingest rate into a fresh server.
The series are named and labelled as a scrape of gpuscope's exporter would have them
(prometheus_series).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscope.bench.prometheus_backfill import BackfillFigures, backfill
from gpuscope.bench.prometheus_http import RUNS, Timed, query, query_range
from gpuscope.bench.prometheus_questions import Answer, Question, all_questions, ask, page_gpu
from gpuscope.bench.prometheus_remote_write import remote_write_bodies, remote_write_rate
from gpuscope.bench.prometheus_rules import RulesBackfill, backfill_rules, move_blocks, rule_evaluations, rules_yaml
from gpuscope.bench.prometheus_server import PrometheusServer, block_dirs, tsdb_bytes, wait_compacted
from gpuscope.bench.telemetry import Telemetry

__all__ = [
    "RUNS", "Answer", "BackfillFigures", "PrometheusServer", "Question", "RulesBackfill", "StorageFigures",
    "Timed", "add_recording_rules", "all_questions", "ask", "backfill", "page_gpu", "query", "query_range",
    "remote_write_bodies", "remote_write_rate", "rule_evaluations", "storage_figures", "tsdb_bytes",
    "wait_compacted",
]  # fmt: skip


@dataclass(frozen=True)
class StorageFigures:
    bytes: int  # the blocks (chunks, index, meta, tombstones); not the WAL or chunks_head
    blocks: int
    bytes_per_gpu_day: float
    bytes_per_sample: float


def storage_figures(telemetry: Telemetry, data_dir: Path, samples: int) -> StorageFigures:
    """What the TSDB keeps for `samples` samples of `telemetry`, per GPU-day and per sample."""
    size = tsdb_bytes(data_dir)
    days = telemetry.steps * telemetry.step_s / 86400
    return StorageFigures(
        size, len(block_dirs(data_dir)), round(size / (len(telemetry.gpus) * days)), round(size / samples, 3)
    )


def add_recording_rules(server: PrometheusServer, telemetry: Telemetry, work_dir: Path) -> RulesBackfill:
    """Backfills the recording rules from the running `server`, stops it, moves the blocks into its TSDB
    and starts it again (on a new port: read server.port afterwards)."""
    rules_file = work_dir / "recording-rules.yml"
    rules_file.write_text(rules_yaml())
    output = work_dir / "rule-blocks"
    figures = backfill_rules(server.port, telemetry, rules_file, output)
    server.stop()
    move_blocks(output, server.data_dir)
    server.start()
    return figures
