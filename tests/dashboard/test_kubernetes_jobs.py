"""Kubernetes jobs in the dashboard, in real headless Chromium: a JobSet's pods on two nodes, sent as the
exporter sends Kubernetes attribution, are one job on /jobs with its namespace and workload, and its page
names the pods; a Slurm job beside it keeps its user; a pod on a MIG slice is a job whose page lists the
slice with its own activity."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.exporter.snapshot import GpuIdentity, GpuReading, JobInfo, MigReading, Snapshot
from gpuscope.exporter.wire import Origin
from tests.collector.helpers import push_binary
from tests.dashboard.helpers import dashboard_over_collector
from tests.processes import RunningCollector

JOB = "research/llama"
MIG_JOB = "serve/infer-a"


def _job_on(node: int) -> JobInfo:
    pod = f"llama-workers-0-{node}"
    return JobInfo(JOB, None, "research", pod, "trainer", "JobSet/llama")


@pytest.fixture(scope="module")
def dashboard(postgres: EmbeddedPostgres) -> Iterator[str]:
    with dashboard_over_collector(postgres, _load) as url:
        yield url


def _load(collector: RunningCollector) -> None:
    now = time.time()
    for node in range(3):
        origin = Origin("c", "r1", f"node-{node}", "sim", str(uuid.uuid4()))
        gpus = [GpuIdentity(i, f"GPU-{uuid.uuid4()}", "H100", f"00:{i:02x}") for i in range(2)]
        job = _job_on(node) if node < 2 else JobInfo("4711", "ada")
        snapshots = [
            Snapshot(
                ts=now - 300 + 10 * t,
                gpus=tuple(GpuReading(g, True, {"util_pct": 90.0, "tensor_active_pct": 40.0}) for g in gpus),
                ports=(),
                jobs={g.index: job for g in gpus},
            )
            for t in range(30)
        ]
        push_binary(collector, origin, 1, snapshots)
    _post_mig_node(collector, now)


def test_a_jobset_is_one_job_with_its_namespace_and_workload(dashboard: str, browser: Any) -> None:
    open_page(browser, dashboard + "/jobs?range=1h")
    table = wait_until(browser, lambda: browser.find_element("id", "jobs"), 10, "the jobs table")
    headers = [cell.text for cell in table.find_elements("css selector", "th")]
    assert headers[:4] == ["job", "user", "namespace", "workload"]
    rows = {
        cells[0].text: [c.text for c in cells]
        for cells in (row.find_elements("css selector", "td") for row in table.find_elements("css selector", "tr"))
        if cells
    }
    assert rows[JOB][1:6] == ["-", "research", "JobSet/llama", "running", "2"], "one job, two nodes"
    assert rows["4711"][1:4] == ["ada", "-", "-"], "a Slurm job beside it keeps its user, no pod columns"
    screenshot(browser, "jobs-kubernetes")
    link = browser.find_element("link text", JOB)
    assert link.get_attribute("href") == f"{dashboard}/jobs/{quote(JOB, safe='')}"
    link.click()
    summary = wait_until(
        browser, lambda: browser.find_element("id", "job-summary").text or None, 10, "the job's summary"
    )
    assert "namespace research · JobSet/llama · pods llama-workers-0-0, llama-workers-0-1" in summary
    assert "4 GPUs on 2 nodes" in summary
    assert console_errors(browser) == []


def _post_mig_node(collector: Any, now: float) -> None:
    """node-mig: one GPU split 3g + 1g; a pod holds the 1g slice, nothing holds the 3g."""
    gpu = GpuIdentity(0, f"GPU-{uuid.uuid4()}", "H100", "00:00")
    migs = (
        MigReading(1, 0, "3g.40gb", "MIG-big", 3, 7, {"mig_sm_active_pct": 80.0}),
        MigReading(2, 0, "1g.10gb", "MIG-small", 1, 7, {"mig_sm_active_pct": 30.0, "mig_tensor_active_pct": 12.0}),
    )
    job = JobInfo(MIG_JOB, None, "serve", "infer-a", "server")
    snapshots = [
        Snapshot(
            ts=now - 300 + 10 * t,
            gpus=(GpuReading(gpu, True, {"sm_active_pct": 38.6}, mig=migs),),
            ports=(),
            jobs={},
            mig_jobs={"MIG-small": job},
        )
        for t in range(30)
    ]
    origin = Origin("c", "r1", "node-mig", "nvml", str(uuid.uuid4()))
    push_binary(collector, origin, 1, snapshots)


def test_a_job_on_a_mig_slice_lists_the_slice_with_its_own_activity(dashboard: str, browser: Any) -> None:
    open_page(browser, f"{dashboard}/jobs/{quote(MIG_JOB, safe='')}")
    summary = wait_until(
        browser, lambda: browser.find_element("id", "job-summary").text or None, 10, "the job's summary"
    )
    assert "1 MIG device of 1 GPU on 1 node" in summary
    table = wait_until(browser, lambda: browser.find_element("id", "job-mig-table"), 10, "the MIG devices table")
    [row] = [
        [c.text for c in cells]
        for cells in (row.find_elements("css selector", "td") for row in table.find_elements("css selector", "tr"))
        if cells
    ]
    assert row[:8] == ["node-mig", "0", "2/0", "1g.10gb", "1/7", "infer-a", "30%", "12%"]
    screenshot(browser, "job-mig")
    assert console_errors(browser) == []
