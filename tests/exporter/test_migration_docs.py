"""docs/migrating-from-dcgm-exporter.md tells the truth: every name in its tables is served with the type
it gives, and every gpuscope flag it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscope.cli import _parser
from gpuscope.exporter.exposition import ExporterIdentity, Exposition, NameSets
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from gpuscope.exporter.snapshot import Snapshot

DOC = Path(__file__).resolve().parents[2] / "docs" / "migrating-from-dcgm-exporter.md"


def served_types() -> dict[str, str]:
    topology = build_topology(1, 8, 1)
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    source.read(1_790_000_000.0)
    gpus, ports = source.read(1_790_000_010.0)
    snapshot = Snapshot(ts=1_790_000_010.0, gpus=gpus, ports=ports, driver_version=source.driver_version)
    body = Exposition(ExporterIdentity("c", "r", "n", "sim", "t"), lambda: snapshot, NameSets(dcgm=True)).render(None)
    text = body[0].decode()
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    return {name: kind for name, kind in types.items() if re.search(rf"^{name}{{", text, re.MULTILINE)}


def test_every_name_in_the_table_is_served_with_its_type() -> None:
    text = DOC.read_text()
    rows = re.findall(r"^\| (DCGM_\w+) \| (gauge|counter|label) \|", text, re.MULTILINE)
    assert len(rows) == 26, "dcgm-exporter's default set: 25 metrics and the driver-version label"
    served = served_types()
    for name, kind in rows:
        if kind == "label":
            continue  # on every series: the next test
        assert served.get(name) == kind, (name, served.get(name))
    also = text[text.index("Also served") : text.index("### What a GPU")]
    for name in re.findall(r"DCGM_\w+", also):
        assert name in served, name


def test_the_driver_version_label_is_on_every_series() -> None:
    topology = build_topology(1, 2, 1)
    source = SimNodeSource(topology[0], JobSchedule(topology, 1), 1)
    gpus, ports = source.read(1_790_000_000.0)
    snapshot = Snapshot(ts=1_790_000_000.0, gpus=gpus, ports=ports, driver_version=source.driver_version)
    body, _ = Exposition(
        ExporterIdentity("c", "r", "n", "sim", "t"), lambda: snapshot, NameSets(native=False, dcgm=True)
    ).render(None)
    samples = [line for line in body.decode().splitlines() if line.startswith("DCGM_")]
    assert samples and all('DCGM_FI_DRIVER_VERSION="' in line for line in samples)


def test_every_gpuscope_flag_the_guide_names_exists() -> None:
    text = DOC.read_text()
    flags = set(re.findall(r"(--[a-z][a-z-]+)", text))
    exporter = _parser()._subparsers._group_actions[0].choices["exporter"].with_all_flags()  # type: ignore[union-attr]
    known = {option for action in exporter._actions for option in action.option_strings}
    dcgm_flags = {"--hpc-job-mapping-dir", "--kubernetes-enable-pod-labels", "--web-config-file", "--collect-interval"}
    assert {"--dcgm-compat", "--compat-only", "--listen", "--slurm-mapping-dir"} <= flags
    assert flags - dcgm_flags <= known, flags - dcgm_flags - known
