"""The simulator shows the families a real H100 node shows: NVLink per link and in total, XIDs (and their
events), ECC and row remaps; with H100 rates, counters that only grow, and nothing for promtool to report."""

from __future__ import annotations

import subprocess
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscope.exporter.catalog import metrics_for
from gpuscope.exporter.events import XID, Event, EventTracker
from gpuscope.exporter.exposition import ExporterIdentity, Exposition
from gpuscope.exporter.http_server import make_server, serve_in_thread, snapshot_health
from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sampler import Sampler
from gpuscope.exporter.sim import JobSchedule, NodeSpec, SimJobs, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import GpuReading, Snapshot
from tests.conftest import require_tool
from tests.waiting import eventually

T0 = 1_790_000_000.0
SEED = 5
LINKS = 18
LINK_PEAK_BYTES_PER_S = 25e9  # NVLink4, per link and direction
XIDS = {13, 31, 43, 48, 63, 74, 79, 94, 95}
APPLICATION_XIDS = {13, 31, 43}
NVLINK_FAMILIES = [f"gpuscope_nvlink_{name}" for name in ("transmit_bytes", "receive_bytes")] + [
    f"gpuscope_nvlink_{kind}_errors" for kind in ("crc", "replay", "recovery")
]
GPU_FAMILIES = [
    "gpuscope_gpu_nvlink_transmit_bytes",
    "gpuscope_gpu_nvlink_receive_bytes",
    "gpuscope_gpu_nvlink_crc_errors",
    "gpuscope_gpu_nvlink_replay_errors",
    "gpuscope_gpu_nvlink_recovery_errors",
    "gpuscope_gpu_ecc_corrected_errors",
    "gpuscope_gpu_ecc_uncorrected_errors",
    "gpuscope_gpu_remapped_rows_correctable",
    "gpuscope_gpu_remapped_rows_uncorrectable",
    "gpuscope_gpu_row_remap_pending",
    "gpuscope_gpu_row_remap_failed",
    "gpuscope_gpu_recovery_action",
]
Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class ServedSim:
    """One simulated node sampled at chosen instants and served over HTTP, from the exporter's own parts."""

    def __init__(self, node: NodeSpec, schedule: JobSchedule, seed: int) -> None:
        self.sampler = Sampler(SimNodeSource(node, schedule, seed), interval=1.0, jobs=SimJobs(node, schedule))
        identity = ExporterIdentity(node.cluster, node.rack, node.name, "sim", "test")
        exposition = Exposition(identity, lambda: self.sampler.latest)
        self.server = make_server("127.0.0.1:0", exposition, snapshot_health(lambda: None, 1.0))
        serve_in_thread(self.server)

    def scrape(self) -> str:
        host, port = self.server.server_address[:2]
        return scrape(str(host), int(port))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def served() -> Iterator[ServedSim]:
    topology = build_topology(4, 8, 1)
    sim = ServedSim(topology[0], JobSchedule(topology, SEED), SEED)
    yield sim
    sim.close()


def scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def parse(body: str) -> tuple[dict[str, str], Series]:
    """(family name -> type, (sample name, labels) -> value)."""
    types, series = {}, {}
    for family in text_string_to_metric_families(body):
        types[family.name] = family.type
        for s in family.samples:
            series[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return types, series


def samples_of(series: Series, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (sample, labels), value in series.items() if sample == name}


def test_a_running_sim_exporter_serves_nvlink_ecc_and_remap_families() -> None:
    topology = build_topology(1, 8, 1)
    node = NodeExporter(
        SimNodeSource(topology[0], JobSchedule(topology, SEED), SEED),
        ExporterConfig("c", "r", topology[0].name, interval=0.2, listen="127.0.0.1:0"),
    )
    node.start()
    try:
        eventually(lambda: node.sampler.latest, timeout=5, what="the exporter's first snapshot")
        body = scrape(*(node.address or ("", 0)))
    finally:
        node.stop()
    types, series = parse(body)
    for name in NVLINK_FAMILIES:
        links = samples_of(series, name + "_total")
        assert types[name] == "counter" and len(links) == 8 * LINKS, name
        assert {dict(labels)["link"] for labels in links} == {str(i) for i in range(LINKS)}
    for name in GPU_FAMILIES:
        gpus = samples_of(series, name + "_total") or samples_of(series, name)
        assert {dict(labels)["gpu"] for labels in gpus} == {str(i) for i in range(8)}, name
    for key in ("transmit_bytes", "receive_bytes", "crc_errors", "replay_errors", "recovery_errors"):
        per_link, per_gpu = (samples_of(series, f"gpuscope_{scope}_{key}_total") for scope in ("nvlink", "gpu_nvlink"))
        for gpu_labels, total in per_gpu.items():
            links = [v for labels, v in per_link.items() if set(gpu_labels) <= set(labels)]
            assert len(links) == LINKS and total == pytest.approx(sum(links), rel=1e-12), key
    assert all(v == 0 for v in samples_of(series, "gpuscope_gpu_row_remap_failed").values())


def test_counters_only_grow_and_promtool_finds_nothing(served: ServedSim) -> None:
    """Two days at ten-minute steps, over jobs and idle gaps, until XIDs have happened."""
    bodies = []
    for i, t in enumerate(np.arange(T0, T0 + 2 * 86400, 600.0)):
        served.sampler.sample_once(now=float(t))
        if i % 12 == 0:
            bodies.append(served.scrape())
    bodies.append(served.scrape())
    previous: Series = {}
    for body in bodies:
        types, series = parse(body)
        counters = {key: v for key, v in series.items() if types.get(key[0].removesuffix("_total")) == "counter"}
        assert previous.keys() - counters.keys() == set(), "a counter vanished"
        assert all(counters[key] >= value for key, value in previous.items()), "a counter went down"
        previous = counters
    xids = samples_of(previous, "gpuscope_gpu_xid_errors_total")
    assert xids, "two days of eight GPUs: some XIDs"
    assert {int(dict(labels)["xid"]) for labels in xids} <= XIDS
    body = bodies[-1].encode()
    result = subprocess.run(
        [require_tool("promtool"), "check", "metrics"], input=body, capture_output=True, timeout=30, check=False
    )
    assert (result.returncode, result.stdout + result.stderr) == (0, b"")


@dataclass
class ClusterDay:
    """A day of the demo-sized cluster (16 nodes of 8 GPUs) at five-minute steps, reduced as it runs."""

    step: float = 300.0
    events: list[tuple[int, Event]] = field(default_factory=list)  # (node, event)
    busy_link_rates: list[np.ndarray] = field(default_factory=list)  # tx bytes/s per link, job all interval
    idle_link_rates: list[np.ndarray] = field(default_factory=list)
    rx_over_tx: list[np.ndarray] = field(default_factory=list)
    last: dict[int, tuple[GpuReading, ...]] = field(default_factory=dict)
    xids_while_idle: list[int] = field(default_factory=list)


def per_link(gpus: tuple[GpuReading, ...], key: str) -> np.ndarray:
    """(GPU, link) values of one per-link key."""
    return np.array([[links[i][key] for i in range(LINKS)] for links in (r.links for r in gpus)])


@pytest.fixture(scope="module")
def day() -> ClusterDay:
    topology = build_topology(16, 8, 4, cluster="demo")
    schedule = JobSchedule(topology, SEED)
    out = ClusterDay()
    for node in topology:
        source, tracker = SimNodeSource(node, schedule, SEED), EventTracker()
        before: tuple[np.ndarray, np.ndarray] | None = None
        for t in np.arange(T0, T0 + 86400, out.step):
            gpus, ports = source.read(float(t))
            job = schedule.job_at(node.index, float(t))
            events = tracker.observe(Snapshot(ts=float(t), gpus=gpus, ports=ports))
            out.events += [(node.index, e) for e in events]
            out.xids_while_idle += [e.code or 0 for e in events if e.kind == XID and job is None]
            now = per_link(gpus, "link_tx_bytes"), per_link(gpus, "link_rx_bytes")
            if before is not None:
                tx, rx = ((a - b) / out.step for a, b in zip(now, before, strict=True))
                if job is None:
                    out.idle_link_rates.append(tx)
                elif job == schedule.job_at(node.index, float(t) - out.step):
                    out.busy_link_rates.append(tx)
                    out.rx_over_tx.append(rx / tx)
            before = now
        out.last[node.index] = gpus
    return out


def test_nvlink_carries_the_jobs_traffic_at_h100_rates(day: ClusterDay) -> None:
    busy, idle = np.array(day.busy_link_rates), np.array(day.idle_link_rates)
    assert busy.size and idle.size
    assert (busy > 0).all(), "every link of a GPU in a job carries some of its collectives"
    assert busy.max() <= LINK_PEAK_BYTES_PER_S, "no link beats NVLink4's 25 GB/s per direction"
    assert busy.max() > 0.6 * LINK_PEAK_BYTES_PER_S, "all-reduce-heavy jobs come near the peak"
    assert 1e9 < np.median(busy) < 20e9
    assert (idle == 0).all(), "an idle GPU moves nothing over NVLink"
    assert np.allclose(np.array(day.rx_over_tx), 1.0, atol=0.01), "an all-reduce receives what it sends"


def test_nvlink_errors_are_rare_and_on_few_links(day: ClusterDay) -> None:
    crc = np.array([per_link(gpus, "link_crc_errors") for gpus in day.last.values()])
    replay = np.array([per_link(gpus, "link_replay_errors") for gpus in day.last.values()])
    assert crc.sum() > 0, "a few marginal links show CRC errors"
    assert (crc == 0).mean() > 0.95, "most links never see one"
    assert (replay >= crc).all(), "every CRC error is replayed"


def test_xids_arrive_every_ten_to_thirty_minutes_mostly_from_applications(day: ClusterDay) -> None:
    xids = [e for _, e in day.events if e.kind == XID]
    assert {e.code for e in xids} <= XIDS
    count = {code: sum(e.count for e in xids if e.code == code) for code in XIDS}
    incidents = sum(count.values()) - 2 * (count[94] + count[95])  # an uncorrectable error logs 48, 63 and 94/95
    assert 48 <= incidents <= 144, f"{incidents} XID incidents in a day on 128 GPUs"
    assert sum(count[code] for code in APPLICATION_XIDS) > incidents / 2, "most XIDs are application faults"
    assert not set(day.xids_while_idle) & APPLICATION_XIDS, "no application, no application fault"


def test_ecc_and_row_remaps_follow_the_xids(day: ClusterDay) -> None:
    counts: dict[tuple[int, int], dict[int, int]] = {}
    for node, event in day.events:
        if event.kind == XID and event.gpu is not None and event.code is not None:
            codes = counts.setdefault((node, event.gpu), {})
            codes[event.code] = codes.get(event.code, 0) + event.count
    readings = [(node, r) for node, gpus in day.last.items() for r in gpus]
    corrected = np.array([r.values["ecc_corrected"] for _, r in readings])
    assert (corrected == 0).mean() > 0.7 and corrected.max() > 0, "corrected errors: a few weak GPUs"
    uncorrectable = 0
    for node, r in readings:
        codes = counts.get((node, r.gpu.index), {})
        contained_or_not = codes.get(94, 0) + codes.get(95, 0)
        assert r.values["ecc_uncorrected"] == contained_or_not == codes.get(48, 0)
        assert r.values["remapped_rows_uncorrectable"] >= contained_or_not
        assert codes.get(63, 0) >= contained_or_not, "an uncorrectable error's row is remapped"
        assert r.values["remap_pending"] in (0.0, 1.0) and r.values["remap_failure"] == 0.0
        if r.values["remap_pending"]:
            assert codes.get(63, 0) > 0, "a pending remap was logged"
        uncorrectable += contained_or_not
    assert uncorrectable > 0, "a day of 128 GPUs shows an uncorrectable error or two"


def test_gpu_and_link_counters_are_catalog_keys() -> None:
    topology = build_topology(1, 8, 1)
    gpus, _ = SimNodeSource(topology[0], JobSchedule(topology, SEED), SEED).read(T0)
    gpu_keys, link_keys = {s.key for s in metrics_for("gpu")}, {s.key for s in metrics_for("nvlink")}
    assert all(set(r.values) <= gpu_keys for r in gpus)
    assert all(set(values) == link_keys for r in gpus for values in r.links.values())
    assert all(sorted(r.links) == list(range(LINKS)) for r in gpus)
