"""--amd-compat: AMD device-metrics-exporter's names, units and labels, from the fake amdsmi backend."""

from __future__ import annotations

import re
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from gpuscope.exporter import amd_compat
from gpuscope.exporter.amd_compat import LABELS, amd_families
from gpuscope.exporter.amd_names import GPU_NAMES, LINK_NAMES
from gpuscope.exporter.catalog import keys_for
from gpuscope.exporter.snapshot import JobInfo, Snapshot
from gpuscope.exporter.sources.amdsmi import AmdSmiSource
from gpuscope.exporter.testing.fake_amdsmi import GIB, FakeAmdGpu, make_fake_amdsmi, mi300x_node
from gpuscope.exporter.textformat import OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE, render
from tests.conftest import require_tool

DASHBOARD_METRICS = Path(__file__).parent / "data" / "amd_dashboard_metrics.txt"
HOST = "node-7"
MIB = 2**20


def amd_snapshot(
    gpus: list[FakeAmdGpu] | None = None, lost: tuple[int, ...] = (), jobs: dict[int, JobInfo] | None = None
) -> Snapshot:
    fakes = gpus if gpus is not None else mi300x_node(4)
    source = AmdSmiSource(make_fake_amdsmi(fakes))
    for i in lost:
        fakes[i].lost = True
    readings, _ = source.read(1.0)  # the first cycle also reads the slow counters (ECC, PCIe replays)
    return Snapshot(ts=1.0, gpus=readings, ports=(), jobs=jobs, driver_version="6.10.5")


def scrape(snapshot: Snapshot, content_type: str = TEXT_CONTENT_TYPE) -> dict[str, list[Sample]]:
    """Sample name -> samples, as Prometheus reads the rendered page."""
    body = render(amd_families(snapshot, HOST), content_type).decode()
    parse = parse_openmetrics if content_type == OPENMETRICS_CONTENT_TYPE else text_string_to_metric_families
    samples: dict[str, list[Sample]] = defaultdict(list)
    for family in parse(body):
        for sample in family.samples:
            samples[sample.name].append(sample)
    return dict(samples)


def types(snapshot: Snapshot) -> dict[str, str]:
    body = render(amd_families(snapshot, HOST), TEXT_CONTENT_TYPE).decode()
    return {s.name: f.type for f in text_string_to_metric_families(body) for s in f.samples}


def by_gpu(samples: list[Sample], **labels: str) -> dict[str, float]:
    return {s.labels["gpu_id"]: s.value for s in samples if all(s.labels.get(k) == v for k, v in labels.items())}


def documented_absent() -> set[str]:
    doc = amd_compat.__doc__ or ""
    return set(re.findall(r"\b(?:gpu|pcie)_[a-z0-9_]*[a-z0-9]\b", doc.split("\nAbsent:", 1)[1]))


def test_values_are_in_amds_units() -> None:
    snapshot = amd_snapshot()
    reading = snapshot.gpus[0]
    got = scrape(snapshot)
    assert by_gpu(got["gpu_power_usage"])["0"] == reading.values["power_w"] == 640, "W"
    assert by_gpu(got["gpu_package_power"])["0"] == 640
    energy = by_gpu(got["gpu_energy_consumed"])["0"]
    assert energy == pytest.approx(reading.values["energy_j"] * 1e6), "uJ"
    assert energy == pytest.approx(152_000_000_000 * 15.259), "the accumulator times its resolution, in uJ"
    assert by_gpu(got["gpu_gfx_activity"])["0"] == 95, "percent, 0-100"
    assert by_gpu(got["gpu_umc_activity"])["0"] == 40
    assert by_gpu(got["gpu_junction_temperature"])["0"] == 74, "the hotspot sensor"
    assert by_gpu(got["gpu_memory_temperature"])["0"] == 68
    assert by_gpu(got["gpu_total_vram"])["0"] == 192 * GIB / MIB == 196608, "MB (MiB)"
    assert by_gpu(got["gpu_used_vram"])["0"] == 150 * 1024
    assert by_gpu(got["gpu_free_vram"])["0"] == 42 * 1024
    assert by_gpu(got["gpu_clock"], clock_type="system")["0"] == 2100, "MHz"
    assert by_gpu(got["gpu_clock"], clock_type="memory")["0"] == 1300
    assert by_gpu(got["gpu_ecc_correct_total"])["0"] == 0
    assert by_gpu(got["gpu_ecc_uncorrect_total"])["0"] == 0
    assert by_gpu(got["pcie_replay_count"])["0"] == 0
    rx = {s.labels["link_index"]: s.value for s in got["gpu_xgmi_link_rx"] if s.labels["gpu_id"] == "0"}
    tx = {s.labels["link_index"]: s.value for s in got["gpu_xgmi_link_tx"] if s.labels["gpu_id"] == "0"}
    assert rx == {str(i): 5_000_000 + i for i in range(7)}, "KB, as amdsmi counts them, one per XGMI link"
    assert tx == {str(i): 6_000_000 + i for i in range(7)}
    assert got["gpu_nodes_total"][0].value == 4


def test_types_are_amds_gauges_but_the_ecc_counters() -> None:
    assert types(amd_snapshot()) == {
        **dict.fromkeys(
            [
                "gpu_gfx_activity",
                "gpu_umc_activity",
                "gpu_power_usage",
                "gpu_package_power",
                "gpu_energy_consumed",
                "gpu_junction_temperature",
                "gpu_memory_temperature",
                "gpu_clock",
                "gpu_total_vram",
                "gpu_used_vram",
                "gpu_free_vram",
                "pcie_replay_count",
                "gpu_xgmi_link_rx",
                "gpu_xgmi_link_tx",
                "gpu_nodes_total",
            ],
            "gauge",
        ),
        "gpu_ecc_correct_total": "counter",
        "gpu_ecc_uncorrect_total": "counter",
    }


def test_openmetrics_has_the_same_sample_names() -> None:
    snapshot = amd_snapshot()
    text, openmetrics = scrape(snapshot), scrape(snapshot, OPENMETRICS_CONTENT_TYPE)
    assert {name: len(s) for name, s in openmetrics.items()} == {name: len(s) for name, s in text.items()}


def test_labels() -> None:
    gpus = mi300x_node(2)
    gpus[0].product_serial = "692247001282"
    gpus[1].unsupported = {"board"}  # amdsmi_get_gpu_board_info answers NOT_SUPPORTED
    pod = JobInfo("ml/llama", None, "ml", "llama-0-0", "trainer", "JobSet/llama")
    snapshot = amd_snapshot(gpus, jobs={1: JobInfo("4242", "alice")})
    on_kubernetes = scrape(amd_snapshot(gpus, jobs={0: pod}))["gpu_power_usage"]
    got = scrape(snapshot)
    power = {s.labels["gpu_id"]: s.labels for s in got["gpu_power_usage"]}
    assert list(power["0"]) == LABELS
    assert power["0"] == {
        "gpu_id": "0",
        "gpu_uuid": gpus[0].uuid,
        "gpu_partition_id": "NA",
        "serial_number": "692247001282",
        "card_model": "102-G30211-00",
        "driver_version": "6.10.5",
        "hostname": HOST,
        "job_id": "",
        "job_user": "",
        "pod": "",
        "namespace": "",
        "container": "",
    }
    assert power["1"]["serial_number"] == "", "unknown serial: empty, as AMD's exporter leaves it"
    assert power["1"]["card_model"] == "AMD Instinct MI300X", "no part number: the model name"
    assert (power["1"]["job_id"], power["1"]["job_user"]) == ("4242", "alice")
    labels = next(s.labels for s in on_kubernetes if s.labels["gpu_id"] == "0")
    pod_labels = [labels[k] for k in ("job_id", "pod", "namespace", "container")]
    assert pod_labels == ["ml/llama", "llama-0-0", "ml", "trainer"]
    clock = got["gpu_clock"][0].labels
    assert list(clock) == [*LABELS, "clock_type"]
    assert list(got["gpu_xgmi_link_rx"][0].labels) == [*LABELS, "link_index"]
    assert got["gpu_nodes_total"][0].labels == {"hostname": HOST}


def test_partitions_are_labelled_and_device_wide_values_come_from_partition_0() -> None:
    snapshot = amd_snapshot(mi300x_node(2, partitions=2))  # handles: GPU 0 p0, GPU 1 p0, GPU 0 p1, GPU 1 p1
    got = scrape(snapshot)
    partition = {s.labels["gpu_id"]: s.labels["gpu_partition_id"] for s in got["gpu_gfx_activity"]}
    assert partition == {"0": "0", "1": "0", "2": "1", "3": "1"}
    for name in ("gpu_power_usage", "gpu_energy_consumed", "gpu_junction_temperature", "gpu_ecc_correct_total"):
        assert set(by_gpu(got[name])) == {"0", "1"}, f"{name}: no 0 for the other partitions, nothing"
    assert {s.labels["gpu_id"] for s in got["gpu_xgmi_link_rx"]} == {"0", "1"}
    assert got["gpu_nodes_total"][0].value == 4


def test_absent_values_stay_absent() -> None:
    gpus = mi300x_node(3)
    gpus[1].unsupported = {"power", "xgmi", "vram_temp", "ecc", "energy", "activity"}
    got = scrape(amd_snapshot(gpus))
    for name in (
        "gpu_power_usage",
        "gpu_package_power",
        "gpu_energy_consumed",
        "gpu_memory_temperature",
        "gpu_ecc_correct_total",
        "gpu_ecc_uncorrect_total",
        "gpu_gfx_activity",
        "gpu_umc_activity",
        "gpu_xgmi_link_rx",
        "gpu_xgmi_link_tx",
    ):
        assert set(by_gpu(got[name])) == {"0", "2"}, name
    assert set(by_gpu(got["gpu_junction_temperature"])) == {"0", "1", "2"}
    everywhere = mi300x_node(2)
    for gpu in everywhere:
        gpu.unsupported = {"power", "xgmi"}
    got = scrape(amd_snapshot(everywhere))
    assert not {"gpu_power_usage", "gpu_package_power", "gpu_xgmi_link_rx", "gpu_xgmi_link_tx"} & set(got)


def test_a_lost_gpu_has_no_samples_but_counts_in_gpu_nodes_total() -> None:
    """AMD's exporter writes what its agent answers for a GPU, and counts every GPU the agent lists (it
    keeps the GPUs it found at start): a GPU that answers nothing has no values, and still counts."""
    got = scrape(amd_snapshot(lost=(3,)))
    ids = {s.labels.get("gpu_id") for samples in got.values() for s in samples}
    assert ids == {"0", "1", "2", None}, "None: gpu_nodes_total, which has no gpu_id"
    assert got["gpu_nodes_total"][0].value == 4


def test_promtool_reports_only_amds_own_names() -> None:
    """Nothing but the two names AMD's exporter gives gauges (AMD's exporter draws the same two)."""
    promtool = require_tool("promtool")
    body = render(amd_families(amd_snapshot(jobs={0: JobInfo("1")}), HOST), TEXT_CONTENT_TYPE)
    result = subprocess.run([promtool, "check", "metrics"], input=body, capture_output=True, timeout=30, check=False)
    findings = (result.stdout + result.stderr).decode().splitlines()
    assert sorted(findings) == [
        'gpu_nodes_total non-counter metrics should not have "_total" suffix',
        'pcie_replay_count non-histogram and non-summary metrics should not have "_count" suffix',
    ]


def test_amds_dashboards_query_only_served_or_documented_absent_names() -> None:
    lines = DASHBOARD_METRICS.read_text().splitlines()
    source = " ".join(line for line in lines if line.startswith("#"))
    assert "afd0fe81cfb1a36cf15e79edb057e92adb197946" in source and "grafana/dashboard_gpu.json" in source
    wanted = {line.strip() for line in lines if line.strip() and not line.startswith("#")}
    assert len(wanted) == 28
    served, absent = set(scrape(amd_snapshot())), documented_absent()
    assert not served & absent, "a served family documented as absent"
    assert wanted - served - absent == set()
    assert {"gpu_gfx_activity", "gpu_package_power", "gpu_energy_consumed", "pcie_replay_count"} <= served


def test_the_table_reads_catalog_keys() -> None:
    assert {row.key for row in GPU_NAMES} <= set(keys_for("gpu"))
    assert {row.key for row in LINK_NAMES} <= set(keys_for("nvlink"))
