"""`gpuscope exporter --dcgm-compat` as a drop-in for NVIDIA's dcgm-exporter, judged by a real Prometheus.

One Prometheus (127.0.0.1, a free port, a fresh TSDB under tmp, scraping every second) scrapes two real
exporter processes on loopback: the simulator, and the NVML backend through the real pynvml binding against
the stub libnvidia-ml.so.1 (built by tests/exporter/test_nvml_stub.py's fixture). The facts come from
dcgm-exporter itself, kept as data in tests/exporter/data/dcgm/ (each file names its source commit):

- dashboard_queries.txt: every query of dcgm-exporter's shipped Grafana dashboard (Grafana.com 12239) must
  return data from each exporter;
- default_counters.csv: dcgm-exporter's default counter set (25 metrics) must be served with dcgm-exporter's
  Prometheus type (in the exporter's # TYPE line and in Prometheus's metadata) and a value in its unit;
  commented_counters.csv: the fields it ships commented out must, where gpuscope serves the name, mean the
  same (type and unit);
- labels.txt: the labels dcgm-exporter puts on its series;
- absent.txt: (metric, backend) pairs a backend genuinely cannot give, with the reason; such a metric must
  then be absent there.

Native gpuscope_gpu_* names are served beside the compat names unless --compat-only is given."""

from __future__ import annotations

import contextlib
import csv
import math
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from gpuscope.core.listen import free_loopback_port
from tests.commands import GPUSCOPE, stop_process, wait_healthy
from tests.conftest import require_tool
from tests.exporter.test_nvml_stub import config, stub_env, stub_libraries  # noqa: F401 (a session fixture)
from tests.waiting import eventually

DATA = Path(__file__).resolve().parent / "data" / "dcgm"
BACKENDS = ("sim", "nvml")
GIB, MIB = 2**30, 2**20
SCRAPES = 3  # samples of each target Prometheus holds before the checks start


def _data_lines(name: str) -> list[str]:
    lines = (DATA / name).read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def _counters(name: str) -> list[dict[str, str]]:
    return list(csv.DictReader(_data_lines(name)))


@dataclass(frozen=True)
class Query:
    title: str  # the panel or template variable it belongs to
    expr: str


def _queries() -> list[Query]:
    found, title = [], ""
    for line in (DATA / "dashboard_queries.txt").read_text().splitlines():
        if line.startswith(("# panel: ", "# variable: ")):
            title = line[2:].split(" = ")[0]
        elif line.strip() and not line.startswith("#"):
            found.append(Query(title, line.strip()))
    return found


@dataclass(frozen=True)
class Label:
    name: str
    where: str  # every, mig or xid
    pattern: str
    note: str


DEFAULT_COUNTERS = _counters("default_counters.csv")
COMMENTED_COUNTERS = _counters("commented_counters.csv")
QUERIES = _queries()
LABELS = [Label(*line.split("\t")) for line in _data_lines("labels.txt")]
ABSENT = {(metric, backend): reason for metric, backend, reason in (x.split("\t") for x in _data_lines("absent.txt"))}

# The NVML stub (format: the comment at the top of nvml_stub/stub_nvml.c): GPU 0 whole, with every value
# set here so the compat value can be checked exactly, in dcgm-exporter's unit; GPU 1 in MIG mode.
DRIVER_VERSION = "550.54.15"
XID = 43
STUB_GPU0 = {
    "power_mw": 455250,
    "energy_mj": 123456789,
    "sm_clock_mhz": 1755,
    "mem_clock_mhz": 2619,
    "util_gpu": 64,
    "util_mem": 12,
    "enc_util": 17,
    "dec_util": 23,
    "temp_c": 58,
    "mem_temp_c": 66,
    "fb_total": 80 * GIB,
    "fb_used": 20 * GIB,
    "fb_reserved": 600 * MIB,
    "power_violation_ns": 2_500_000_000,
    "thermal_violation_ns": 750_000_000,
    "pcie_replay": 3,
    "remapped_correctable": 2,
    "remapped_uncorrectable": 1,
    "remap_failure": 0,
    "pcie_tx_bytes_per_s": 1_500_000 * 1024,
    "pcie_rx_bytes_per_s": 700_000 * 1024,
    "sm_active_pct": 71.5,
    "tensor_active_pct": 33.25,
}
STUB_MIG = {  # gpu.1.mig.SLOT = GI,CI,PROFILE,MEMORY_MIB,USED_MIB,SM_PCT,TENSOR_PCT,PIDS
    0: "2,0,3g.40gb,40192,1000,60,30,100",
    2: "9,0,1g.10gb,9856,200,12,21,200 201",
}
MIG_INSTANCES = {("2", "3g.40gb"), ("9", "1g.10gb")}
# What dcgm-exporter would show for the stub's GPU 0, in its units (MHz, C, W, mJ, %, MiB, ns, ratio, B/s).
STUB_EXPECTED = {
    "DCGM_FI_DEV_SM_CLOCK": 1755,
    "DCGM_FI_DEV_MEM_CLOCK": 2619,
    "DCGM_FI_DEV_MEMORY_TEMP": 66,
    "DCGM_FI_DEV_GPU_TEMP": 58,
    "DCGM_FI_DEV_POWER_USAGE": 455.25,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 3,
    "DCGM_FI_DEV_GPU_UTIL": 64,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 12,
    "DCGM_FI_DEV_ENC_UTIL": 17,
    "DCGM_FI_DEV_DEC_UTIL": 23,
    "DCGM_FI_DEV_XID_ERRORS": XID,
    "DCGM_FI_DEV_FB_USED": 20 * 1024,
    "DCGM_FI_DEV_FB_RESERVED": 600,
    "DCGM_FI_DEV_FB_FREE": 80 * 1024 - 20 * 1024 - 600,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 2,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.3325,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1_500_000 * 1024,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 700_000 * 1024,
    "DCGM_FI_DEV_POWER_VIOLATION": 2_500_000_000,
    "DCGM_FI_DEV_THERMAL_VIOLATION": 750_000_000,
    "DCGM_FI_PROF_SM_ACTIVE": 0.715,
}
MEASURED_RATES = {"DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES"}  # from growing byte counters

# Plausible ranges by the unit dcgm-exporter's help text names: a value in another unit (Hz, mW, J,
# bytes, µs, a ratio for a percentage) lands outside them.
UNIT_RANGES = {
    "MHz": (100.0, 20_000.0),
    "C": (10.0, 120.0),
    "W": (1.0, 2_000.0),
    "%": (0.0, 100.0),
    "MiB": (0.0, 4 * 1024 * 1024.0),
    "mJ": (0.0, math.inf),
    "ns": (0.0, math.inf),
    "bytes per second": (0.0, 1e12),
}


def value_problems(row: dict[str, str], value: float) -> list[str]:
    """Why `value` cannot be `row`'s field in dcgm-exporter's unit (none: it can)."""
    unit, help_ = row["unit"], row["help"]
    problems = []
    if not math.isfinite(value):
        return [f"{value} is not a number"]
    if unit in UNIT_RANGES:
        low, high = UNIT_RANGES[unit]
        if not low <= value <= high:
            problems.append(f"{value:g} is outside [{low:g}, {high:g}] for a value in {unit}")
    elif help_.lower().startswith(("ratio", "the ratio")):
        if not 0.0 <= value <= 1.0:
            problems.append(f"{value:g} is not a ratio in [0, 1] (a percentage?)")
    elif row["field"] == "DCGM_FI_DEV_ROW_REMAP_FAILURE":
        if value not in (0.0, 1.0):
            problems.append(f"{value:g} is not 0 or 1")
    elif value < 0 or value != int(value):
        problems.append(f"{value:g} is not a whole number >= 0")
    if row["type"] == "counter" and value < 0:
        problems.append(f"a counter at {value:g}")
    return problems


# ---- the processes ----


@dataclass
class Exporter:
    backend: str
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def instance(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.instance}"


@contextlib.contextmanager
def running_exporter(backend: str, folder: Path, *extra: str, env: dict[str, str] | None = None) -> Iterator[Exporter]:
    """`gpuscope exporter --backend BACKEND --dcgm-compat` on 127.0.0.1 (a free port), sampling every second."""
    port = free_loopback_port()
    args = ["exporter", "--backend", backend, "--dcgm-compat", "--listen", f"127.0.0.1:{port}", "--interval", "1"]
    args += ["--jobs", "none", "--ib-root", str(folder / "no-infiniband"), *extra]
    if backend == "sim":
        args += ["--sim-gpus", "4"]
    log = folder / f"exporter-{backend}-{port}.log"
    with log.open("wb") as stderr:
        process = subprocess.Popen([*GPUSCOPE, *args], stdout=subprocess.DEVNULL, stderr=stderr, env=env)
    try:
        try:
            wait_healthy(f"http://127.0.0.1:{port}", timeout=30, process=process)
        except (Exception, pytest.fail.Exception) as exc:
            stop_process(process, timeout=10)
            raise AssertionError(f"{' '.join(args)}: not serving ({exc}); its log:\n{log.read_text()[-3000:]}") from exc
        yield Exporter(backend, process, port, log)
    finally:
        stop_process(process, timeout=10)


@dataclass
class Prometheus:
    url: str

    def api(self, path: str, **params: Any) -> Any:
        """The `data` of a Prometheus HTTP API answer; an error answer is a harness error, not a finding."""
        answer = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        body = answer.json()
        if body.get("status") != "success":
            raise RuntimeError(f"Prometheus refused /api/v1/{path} {params}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def values(self, expr: str) -> list[tuple[dict[str, str], float]]:
        return [(r["metric"], float(r["value"][1])) for r in self.query(expr)]


@contextlib.contextmanager
def running_prometheus(folder: Path, targets: dict[str, str]) -> Iterator[Prometheus]:
    """A real Prometheus on 127.0.0.1 (a free port), scraping `targets` (job -> host:port) every second."""
    binary = require_tool("prometheus")
    configuration = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [t]}]} for job, t in targets.items()],
    }
    (folder / "prometheus.yml").write_text(yaml.safe_dump(configuration))
    port = free_loopback_port()
    log = folder / "prometheus.log"
    args = [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'tsdb'}"]
    args += [f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h", "--log.level=warn"]
    with log.open("wb") as stderr:
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=stderr)
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert process.poll() is None, f"prometheus exited: {log.read_text()[-3000:]}"
            return httpx.get(f"{url}/-/ready", timeout=1).status_code == 200

        eventually(ready, timeout=30, interval=0.1, ignoring=(httpx.HTTPError,), what="Prometheus to be ready")
        yield Prometheus(url)
    finally:
        stop_process(process, timeout=10)


@dataclass
class Stack:
    prometheus: Prometheus
    exporters: dict[str, Exporter]
    texts: dict[str, str]  # each exporter's /metrics body, once Prometheus has scraped it a few times

    def declared_types(self, backend: str) -> dict[str, str]:
        """# TYPE lines of `backend`'s /metrics: family -> type."""
        found = re.findall(r"^# TYPE (\S+) (\S+)$", self.texts[backend], flags=re.MULTILINE)
        return dict(found)

    def series(self, backend: str, name: str) -> list[tuple[dict[str, str], float]]:
        return self.prometheus.values(f'{name}{{instance="{self.exporters[backend].instance}"}}')


@pytest.fixture(scope="module")
def stack(stub_libraries: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:  # noqa: F811
    folder = tmp_path_factory.mktemp("dcgm_dropin")
    xids = folder / "gpu0-xids"
    xids.write_text(f"{XID}\n")  # the stub delivers it as an XID event, then deletes the file
    lines = ["gpus=2", f"driver_version={DRIVER_VERSION}", f"gpu.0.xid_file={xids}", "gpu.1.mig=1"]
    lines += [f"gpu.0.{key}={value}" for key, value in STUB_GPU0.items()]
    lines += [f"gpu.1.mig.{slot}={spec}" for slot, spec in STUB_MIG.items()]
    nvml_env = stub_env(stub_libraries["current"], config(folder, *lines))
    with contextlib.ExitStack() as stack_:
        exporters = {
            "sim": stack_.enter_context(running_exporter("sim", folder)),
            "nvml": stack_.enter_context(running_exporter("nvml", folder, env=nvml_env)),
        }
        prometheus = stack_.enter_context(
            running_prometheus(folder, {f"dcgm-{b}": e.instance for b, e in exporters.items()})
        )

        def scraped_enough() -> bool:
            for backend, exporter in exporters.items():
                assert exporter.process.poll() is None, f"{backend} exporter exited: {exporter.log.read_text()}"
                samples = prometheus.values(f'count_over_time(up{{instance="{exporter.instance}"}}[1m])')
                assert samples and samples[0][1] >= SCRAPES, f"{backend}: {samples}"
            return True

        eventually(scraped_enough, timeout=30, interval=0.2, what=f"{SCRAPES} scrapes of each exporter")
        texts = {b: httpx.get(f"{e.url}/metrics", timeout=10).text for b, e in exporters.items()}
        yield Stack(prometheus, exporters, texts)


# ---- the harness itself: these pass today, so a failure below is the product's ----


@pytest.mark.parametrize("backend", BACKENDS)
def test_harness_prometheus_scrapes_the_exporter(stack: Stack, backend: str) -> None:
    instance = stack.exporters[backend].instance
    assert stack.prometheus.values(f'up{{instance="{instance}"}}') == [
        ({"__name__": "up", "instance": instance, "job": f"dcgm-{backend}"}, 1.0)
    ]
    [target] = [t for t in stack.prometheus.api("targets")["activeTargets"] if t["labels"]["instance"] == instance]
    assert (target["health"], target["lastError"]) == ("up", "")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_GPU_TEMP"])
def test_harness_names_served_today_are_found(stack: Stack, backend: str, name: str) -> None:
    """Controls: names --dcgm-compat has served from the start answer through Prometheus."""
    assert stack.series(backend, name), f"{name} from {backend}"
    assert name in stack.declared_types(backend)


def test_harness_the_nvml_exporter_reads_the_stub(stack: Stack) -> None:
    """The stub answered (its GPU UUIDs), not some other libnvidia-ml.so.1 on the machine."""
    text = stack.texts["nvml"]
    assert "GPU-5a1d0000-0000-4000-8000-000000000000" in text, text[:2000]


def test_harness_narrowing_keeps_each_query_valid_and_to_one_exporter(stack: Stack) -> None:
    for query in QUERIES:
        for backend in BACKENDS:
            expr = narrowed(query.expr, stack.exporters[backend].instance)
            assert expr != query.expr and stack.exporters[backend].instance in expr, expr
            stack.prometheus.query(expr)  # raises if Prometheus cannot parse it


# ---- (a) dashboard queries ----

SELECTOR = re.compile(r"\b(DCGM_FI_(?:DEV|PROF)_[A-Z0-9_]+)\b(\s*\{)?")


def narrowed(expr: str, instance: str) -> str:
    """`expr` with instance="HOST:PORT" added to each DCGM_FI_DEV/PROF selector, as choosing that instance in
    the dashboard's $instance does (PromQL allows a second matcher on a label)."""

    def add(match: re.Match[str]) -> str:
        name, brace = match.group(1), match.group(2)
        return f'{name}{{instance="{instance}", ' if brace else f'{name}{{instance="{instance}"}}'

    return SELECTOR.sub(add, expr)


def _query_id(query: Query) -> str:
    return re.sub(r"[^A-Za-z0-9$.]+", "_", query.title).strip("_")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("query", QUERIES, ids=[_query_id(q) for q in QUERIES])
def test_dashboard_query_returns_data(stack: Stack, backend: str, query: Query) -> None:
    instance = stack.exporters[backend].instance
    expr = narrowed(query.expr, instance)
    result = stack.prometheus.values(expr)
    assert result, f"{query.title}: no data from the {backend} exporter for {expr}"
    for labels, value in result:
        assert math.isfinite(value), f"{query.title}: {value} for {labels}"
        assert labels.get("instance", instance) == instance, labels


# ---- (b) the default counter set: present, dcgm-exporter's type, dcgm-exporter's unit ----


def _absent_or_skip(stack: Stack, backend: str, name: str) -> None:
    """For a (metric, backend) of absent.txt: it must be absent there (then this test is skipped)."""
    reason = ABSENT.get((name, backend))
    if reason is None:
        return
    assert not stack.series(backend, name), f"absent.txt says {backend} cannot give {name} ({reason}), yet it serves it"
    pytest.skip(f"documented absent on {backend}: {reason}")


def _target_metadata_types(stack: Stack, backend: str, name: str) -> set[str]:
    instance = stack.exporters[backend].instance
    found = stack.prometheus.api("targets/metadata", match_target=f'{{instance="{instance}"}}', metric=name)
    return {entry["type"] for entry in found}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", DEFAULT_COUNTERS, ids=[row["field"] for row in DEFAULT_COUNTERS])
def test_default_counter_is_served_with_dcgm_exporters_type(stack: Stack, backend: str, row: dict[str, str]) -> None:
    name = row["field"]
    _absent_or_skip(stack, backend, name)
    assert stack.series(backend, name), f"{name} ({row['help']}) is not served by the {backend} exporter"
    declared = stack.declared_types(backend).get(name)
    assert declared == row["type"], f"# TYPE {name} {declared} in /metrics; dcgm-exporter: {row['type']}"
    metadata = _target_metadata_types(stack, backend, name)
    assert metadata == {row["type"]}, f"Prometheus metadata types {metadata}; dcgm-exporter: {row['type']}"
    overall = {entry["type"] for entry in stack.prometheus.api("metadata", metric=name).get(name, [])}
    assert row["type"] in overall, f"/api/v1/metadata types {overall}; dcgm-exporter: {row['type']}"


def _check_values(stack: Stack, backend: str, row: dict[str, str]) -> None:
    name = row["field"]
    series = stack.series(backend, name)
    assert series, f"{name} is not served by the {backend} exporter"
    problems = [
        f"{labels.get('gpu')}/{labels.get('GPU_I_ID', '-')}: {p}"
        for labels, v in series
        for p in value_problems(row, v)
    ]
    assert not problems, f"{name} should be in {row['unit'] or row['help']}: {problems}"
    if backend == "nvml" and name in STUB_EXPECTED:
        values = [v for labels, v in series if labels.get("gpu") == "0" and "GPU_I_ID" not in labels]
        assert len(values) == 1, f"{name}: one series for the stub's GPU 0 expected, found {series}"
        [value], expected = values, STUB_EXPECTED[name]
        tolerance = 1e-2 if name in MEASURED_RATES else 1e-6
        assert value == pytest.approx(expected, rel=tolerance), f"{name}{{gpu=0}}: {value}, the stub gives {expected}"
    if backend == "sim" and name == "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":
        _check_energy_against_power(stack, backend)


def _check_energy_against_power(stack: Stack, backend: str) -> None:
    """mJ: the energy counter grows by 1000 x the power draw in W per second (the simulator integrates
    power). From the raw samples Prometheus holds: rate() would divide by the whole window, which is longer
    than the series here."""
    instance = stack.exporters[backend].instance
    data = stack.prometheus.api("query", query=f'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{instance="{instance}"}}[1m]')
    power = {
        labels["gpu"]: watts
        for labels, watts in stack.prometheus.values(
            f'avg_over_time(DCGM_FI_DEV_POWER_USAGE{{instance="{instance}"}}[1m])'
        )
    }
    ratios = {}
    for series in data["result"]:
        (t0, e0), (t1, e1) = series["values"][0], series["values"][-1]
        gpu = series["metric"]["gpu"]
        if t1 - t0 >= 3 and gpu in power:
            ratios[gpu] = (float(e1) - float(e0)) / (t1 - t0) / 1000 / power[gpu]
    assert all(0.5 <= ratio <= 2 for ratio in ratios.values()), f"energy growth / 1000 over power draw: {ratios}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", DEFAULT_COUNTERS, ids=[row["field"] for row in DEFAULT_COUNTERS])
def test_default_counter_value_is_in_dcgm_exporters_unit(stack: Stack, backend: str, row: dict[str, str]) -> None:
    _absent_or_skip(stack, backend, row["field"])
    _check_values(stack, backend, row)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("row", COMMENTED_COUNTERS, ids=[row["field"] for row in COMMENTED_COUNTERS])
def test_a_served_non_default_dcgm_name_means_what_dcgm_exporter_means(
    stack: Stack, backend: str, row: dict[str, str]
) -> None:
    """Not in the default set, so not required; but under dcgm-exporter's name, dcgm-exporter's type and unit."""
    name = row["field"]
    if not stack.series(backend, name):
        pytest.skip(f"{name} is not served by {backend} (not in dcgm-exporter's default set)")
    declared = stack.declared_types(backend).get(name)
    assert declared == row["type"], f"# TYPE {name} {declared} in /metrics; dcgm-exporter: {row['type']}"
    assert _target_metadata_types(stack, backend, name) == {row["type"]}
    _check_values(stack, backend, row)


# ---- (c) labels ----


def _dcgm_series(stack: Stack, backend: str) -> list[dict[str, str]]:
    instance = stack.exporters[backend].instance
    found: list[dict[str, str]] = stack.prometheus.api(
        "series", **{"match[]": f'{{__name__=~"DCGM_FI_.+",instance="{instance}"}}'}
    )
    return found


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("label", [x for x in LABELS if x.where == "every"], ids=lambda x: x.name)
def test_label_is_on_every_dcgm_series(stack: Stack, backend: str, label: Label) -> None:
    series = _dcgm_series(stack, backend)
    assert series, f"no DCGM_FI_* series from {backend}"
    missing = sorted({s["__name__"] for s in series if label.name not in s})
    assert not missing, f"{label.name} ({label.note}) missing on {missing}"
    wrong = sorted({s[label.name] for s in series if not re.fullmatch(label.pattern, s[label.name])})
    assert not wrong, f"{label.name} values {wrong} do not match {label.pattern!r} ({label.note})"
    if label.name == "device":
        assert all(s["device"] == f"nvidia{s['gpu']}" for s in series if "gpu" in s)
    if label.name == "Hostname":
        assert {s["Hostname"] for s in series} == {socket.gethostname()}, "dcgm-exporter: os.Hostname()"
    if label.name == "DCGM_FI_DRIVER_VERSION" and backend == "nvml":
        assert {s[label.name] for s in series} == {DRIVER_VERSION}, "the stub's nvmlSystemGetDriverVersion"


def test_mig_instances_carry_gpu_i_id_and_gpu_i_profile(stack: Stack) -> None:
    """The stub's GPU 1 is in MIG mode with two GPU instances: their series carry both labels, beside the
    parent's gpu, UUID and device."""
    names = [x.name for x in LABELS if x.where == "mig"]
    assert names == ["GPU_I_PROFILE", "GPU_I_ID"]
    instances = [s for s in _dcgm_series(stack, "nvml") if any(n in s for n in names)]
    assert instances, "no DCGM_FI_* series with GPU_I_ID / GPU_I_PROFILE for the MIG GPU"
    for label in (x for x in LABELS if x.where == "mig"):
        assert all(re.fullmatch(label.pattern, s.get(label.name, "")) for s in instances), label
    assert {(s["GPU_I_ID"], s["GPU_I_PROFILE"]) for s in instances} == MIG_INSTANCES
    assert {(s["gpu"], s["UUID"], s["device"]) for s in instances} == {
        ("1", "GPU-5a1d0000-0000-4000-8000-000000000001", "nvidia1")
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_xid_errors_carry_err_code_and_err_msg(stack: Stack, backend: str) -> None:
    _absent_or_skip(stack, backend, "DCGM_FI_DEV_XID_ERRORS")
    series = stack.series(backend, "DCGM_FI_DEV_XID_ERRORS")
    assert series, f"DCGM_FI_DEV_XID_ERRORS is not served by the {backend} exporter"
    for label in (x for x in LABELS if x.where == "xid"):
        bad = [labels for labels, _ in series if not re.fullmatch(label.pattern, labels.get(label.name, ""))]
        assert not bad, f"{label.name} ({label.note}): {bad}"
    assert all(labels["err_code"] == f"{value:.0f}" for labels, value in series), series
    if backend == "nvml":
        assert [v for labels, v in series if labels["gpu"] == "0"] == [XID]


# ---- (d) native names beside the compat names, unless --compat-only ----


@pytest.mark.parametrize("backend", BACKENDS)
def test_native_names_are_served_beside_the_compat_names(stack: Stack, backend: str) -> None:
    instance = stack.exporters[backend].instance
    native = stack.prometheus.values(f'count({{__name__=~"gpuscope_gpu_.+",instance="{instance}"}})')
    assert native, f"no gpuscope_gpu_* series from the {backend} exporter run with --dcgm-compat"
    assert stack.series(backend, "gpuscope_gpu_temperature_celsius"), "the native name of DCGM_FI_DEV_GPU_TEMP"


def test_compat_only_serves_the_compat_names_alone(tmp_path: Path) -> None:
    with running_exporter("sim", tmp_path, "--compat-only") as exporter:

        def scraped() -> str:
            text = httpx.get(f"{exporter.url}/metrics", timeout=5).text
            assert "\nDCGM_FI_DEV_GPU_TEMP{" in text
            return text

        text = eventually(scraped, timeout=15, ignoring=(AssertionError, httpx.HTTPError), what="DCGM names")
    native = sorted({line.split("{")[0].split()[0] for line in text.splitlines() if line.startswith("gpuscope_gpu_")})
    assert not native, f"--compat-only still serves {native}"


def test_the_data_files_hold_what_the_tests_expect() -> None:
    """25 default metrics, each with a type and its source file; one query per dashboard target."""
    assert len(DEFAULT_COUNTERS) == 25 and len({row["field"] for row in DEFAULT_COUNTERS}) == 25
    assert all(row["type"] in ("gauge", "counter") and row["source"] for row in DEFAULT_COUNTERS)
    assert {row["field"] for row in COMMENTED_COUNTERS}.isdisjoint(row["field"] for row in DEFAULT_COUNTERS)
    assert len(QUERIES) == 10 and all(q.title for q in QUERIES)
    assert all(x.where in ("every", "mig", "xid") for x in LABELS)
    assert all(backend in BACKENDS for _, backend in ABSENT)
    assert set(STUB_EXPECTED) <= {row["field"] for row in DEFAULT_COUNTERS + COMMENTED_COUNTERS}
