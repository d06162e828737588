"""The Prometheus scrape configuration shipped for gpuscope is valid for promtool."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from tests.conftest import require_tool

PROMETHEUS = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def test_promtool_checks_the_scrape_config() -> None:
    result = subprocess.run(
        [require_tool("promtool"), "check", "config", "prometheus.yml"],
        capture_output=True, text=True, timeout=60, check=False, cwd=PROMETHEUS,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout and "19 rules found" in result.stdout, "the rules load with it"


def test_instance_stays_host_and_port() -> None:
    """Two exporters on one host must stay two instances: nothing rewrites `instance`."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    for job in config["scrape_configs"]:
        for relabel in job.get("relabel_configs", []):
            assert relabel.get("target_label") != "instance", job["job_name"]


def test_the_file_sd_example_carries_topology_that_does_not_clash() -> None:
    """Target labels carry the topology; they must not be labels the exporter sets on its own series,
    or Prometheus renames those to exported_*. gpuscope_exporter_info's labels, and the GPU and port ones:"""
    exporter_labels = {"exporter_cluster", "exporter_rack", "node", "backend", "version", "gpu", "uuid", "xid"}
    exporter_labels |= {"device", "port", "link", "reason", "model", "pci_bus_id", "job_id", "user"}
    groups = yaml.safe_load((PROMETHEUS / "gpuscope-exporters.example.yaml").read_text())
    assert groups, "the example has target groups"
    for group in groups:
        assert {"cluster", "rack"} <= set(group["labels"])
        assert not set(group["labels"]) & exporter_labels
        for target in group["targets"]:
            host, _, port = target.rpartition(":")
            assert host and port.isdigit(), f"{target}: host:port, as `instance` will be"
