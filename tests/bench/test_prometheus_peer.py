"""The Prometheus peer bench on a real promtool and prometheus (Debian's 2.42), at a small size: 48 GPUs
(two racks, one of them half full) for an hour. Every question's answer is compared with the telemetry,
value by value; the checks themselves must catch a wrong window and wrong data. Compaction is not waited
for here (Prometheus starts it a minute after it starts); the full-size run does."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscope.bench import prometheus_questions as questions
from gpuscope.bench import prometheus_remote_write as remote_write
from gpuscope.bench.prometheus_backfill import BackfillFigures, backfill
from gpuscope.bench.prometheus_http import fetch
from gpuscope.bench.prometheus_peer import add_recording_rules, storage_figures
from gpuscope.bench.prometheus_rules import rule_evaluations, rules_yaml
from gpuscope.bench.prometheus_series import JOB_INFO, UP, exposed_metrics
from gpuscope.bench.prometheus_server import PrometheusServer
from gpuscope.bench.telemetry import JobSpan, Telemetry, make_telemetry
from tests.conftest import require_tool

GPUS, HOURS, STEP_S, RUNS = 48, 1, 300, 2


@dataclasses.dataclass
class Backfilled:
    telemetry: Telemetry
    data_dir: Path
    figures: BackfillFigures
    job: JobSpan


@pytest.fixture
def backfilled(tmp_path: Path) -> Backfilled:
    telemetry = make_telemetry(gpus=GPUS, hours=HOURS)
    data_dir = tmp_path / "data"
    figures = backfill(telemetry, data_dir, promtool=require_tool("promtool"))
    job = max(telemetry.jobs, key=lambda job: job.end_step - job.first_step)
    return Backfilled(telemetry, data_dir, figures, job)


@pytest.fixture
def server(backfilled: Backfilled) -> Iterator[PrometheusServer]:
    with PrometheusServer(backfilled.data_dir, prometheus=require_tool("prometheus")) as running:
        yield running


def buckets_with_samples(telemetry: Telemetry, seconds: int) -> int:
    return len({int(stamp // seconds) for stamp in telemetry.stamps(0, telemetry.steps)})


def test_every_raw_answer_matches_the_telemetry(backfilled: Backfilled, server: PrometheusServer) -> None:
    telemetry, job = backfilled.telemetry, backfilled.job
    answers = {q.name: questions.ask(server.port, q, RUNS) for q in questions.all_questions(telemetry, STEP_S, job)}
    for answer in answers.values():
        assert answer.ok, (answer.name, answer.problems)
        assert answer.p50_ms > 0
    assert (answers["heatmap"].series, answers["heatmap"].points) == (GPUS, GPUS * buckets_with_samples(telemetry, 60))
    assert (answers["rack_power"].series, answers["rack_power"].points) == (
        2,
        2 * buckets_with_samples(telemetry, STEP_S),
    )
    assert answers["job"].series == 2 * len(job.gpus)  # utilisation and power of each of the job's GPUs
    assert (answers["hottest"].series, answers["hottest"].points) == (10, 10)
    assert (answers["one_gpu"].series, answers["one_gpu"].points) == (1, buckets_with_samples(telemetry, 60))


def test_checks_catch_a_wrong_window_and_wrong_data(backfilled: Backfilled, server: PrometheusServer) -> None:
    right = questions.heatmap(backfilled.telemetry)
    seven_samples = dataclasses.replace(right.queries[0], expr=right.queries[0].expr.replace("[1m]", "[70s]"))
    assert not questions.ask(server.port, dataclasses.replace(right, queries=(seven_samples,)), RUNS).ok
    other = make_telemetry(gpus=GPUS, hours=HOURS, end=backfilled.telemetry.end, seed=2)  # same times, other values
    for question in (
        questions.heatmap(other),
        questions.rack_power(other, STEP_S),
        questions.hottest(other),
        questions.one_gpu(other),
    ):
        assert not questions.ask(server.port, question, RUNS).ok, question.name


def test_promtool_keeps_every_sample(backfilled: Backfilled, server: PrometheusServer) -> None:
    """promtool drops out-of-order samples without a word: count what Prometheus holds, name by name."""
    telemetry = backfilled.telemetry
    per_gpu = len(telemetry.gpus) * telemetry.steps
    held = sum(len(job.gpus) * (job.end_step - job.first_step) for job in telemetry.jobs)
    due = {**{metric.name: per_gpu for metric in exposed_metrics()}, UP: per_gpu, JOB_INFO: held}
    assert backfilled.figures.samples == sum(due.values())
    for name, count in due.items():
        data = fetch(
            server.port, "/api/v1/query", {"query": f"sum(count_over_time({name}[2h]))", "time": f"{telemetry.end}"}
        )
        assert float(data["result"][0]["value"][1]) == count, name


def test_blocks_take_a_plausible_size(backfilled: Backfilled) -> None:
    figures = storage_figures(backfilled.telemetry, backfilled.data_dir, backfilled.figures.samples)
    assert figures.blocks == backfilled.figures.files  # one block per file: each file within one 2 h window
    assert 1 <= figures.bytes_per_sample <= 10, figures


def test_answers_from_recording_rules_match_the_telemetry(
    backfilled: Backfilled, server: PrometheusServer, tmp_path: Path
) -> None:
    rules_file = tmp_path / "rules-check.yml"
    rules_file.write_text(rules_yaml())
    subprocess.run([require_tool("promtool"), "check", "rules", str(rules_file)], check=True, capture_output=True)

    rules = add_recording_rules(server, backfilled.telemetry, tmp_path)
    assert rules.blocks > 0 and rules.seconds > 0
    evaluations = rule_evaluations(server.port, backfilled.telemetry)
    assert set((evaluations[1:] - evaluations[:-1]).round(3)) == {60.0}
    assert len(evaluations) >= HOURS * 60
    for question in (
        questions.heatmap_from_rules(backfilled.telemetry, evaluations),
        questions.rack_power_from_rules(backfilled.telemetry, STEP_S, evaluations),
        questions.one_gpu_from_rules(backfilled.telemetry, evaluations),
    ):
        answer = questions.ask(server.port, question, RUNS)
        assert answer.ok, (answer.name, answer.problems)
        assert answer.points > 0


def test_remote_write_samples_land(tmp_path: Path) -> None:
    nodes, batches = 3, 3
    bodies = remote_write.remote_write_bodies(nodes, batches)
    sent = sum(samples for node in bodies for _, samples in node)
    assert len(bodies) == nodes and all(len(node) == batches for node in bodies)
    with PrometheusServer(tmp_path / "rw", prometheus=require_tool("prometheus")) as server:
        acknowledged, seconds, failures = remote_write.remote_write_rate(server.port, bodies, concurrency=nodes)
        assert (acknowledged, failures) == (sent - sum(node[0][1] for node in bodies), 0)
        assert seconds > 0
        assert server.metric('prometheus_tsdb_head_samples_appended_total{type="float"}') == sent
        names = [metric.name for metric in exposed_metrics()] + [UP, JOB_INFO]
        counted = 0
        for name in names:
            data = fetch(server.port, "/api/v1/query", {"query": f"sum(count_over_time({name}[1h]))"})
            counted += int(float(data["result"][0]["value"][1])) if data["result"] else 0
        assert counted == sent
        ratios = fetch(
            server.port, "/api/v1/query", {"query": "max(max_over_time(gpuscope_gpu_utilization_ratio[1h]))"}
        )
        assert 0 < float(ratios["result"][0]["value"][1]) <= 1  # scaled from percent, as the exporter does


def test_a_malformed_remote_write_is_an_error(tmp_path: Path) -> None:
    prometheus = require_tool("prometheus")
    with PrometheusServer(tmp_path / "rw", prometheus=prometheus) as server, pytest.raises(RuntimeError, match="400"):
        remote_write.remote_write_rate(server.port, [[(b"not snappy", 1)]], concurrency=1)


def test_the_hand_written_protobuf() -> None:
    assert remote_write.varint(1) == b"\x01" and remote_write.varint(300) == b"\xac\x02"
    labels = remote_write.encode_labels({"b": "2", "__name__": "m"})
    assert labels == b"\x0a\x0d\x0a\x08__name__\x12\x01m" + b"\x0a\x06\x0a\x01b\x12\x012"  # sorted, __name__ first
    one = remote_write.encode_write_request([(labels, 1.0, 1_700_000_000_000)])
    sample = b"\x09" + b"\x00\x00\x00\x00\x00\x00\xf0\x3f" + b"\x10" + b"\x80\xd0\x95\xff\xbc\x31"  # 1.0, the ms
    assert one == b"\x0a" + bytes([len(labels) + 2 + len(sample)]) + labels + b"\x12" + bytes([len(sample)]) + sample
