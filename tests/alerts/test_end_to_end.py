"""A simulated GPU overheats -> its exporter pushes -> the collector's alert engine fires after `for`
-> a Slack-shaped message reaches a local receiver -> the GPU cools -> the resolved message arrives."""

from __future__ import annotations

import time

import httpx

from gpuscope.exporter.node_exporter import ExporterConfig, NodeExporter
from gpuscope.exporter.sim import JobSchedule, SimNodeSource, build_topology
from tests.alerts.receiver import ChatReceiver
from tests.alerts.rules import gpu_over_temperature
from tests.processes import running_collector

FOR_S, INTERVAL_S = 3.0, 1.0  # as in RULES
RULES = gpu_over_temperature(for_="3s")


def test_an_overheating_gpu_is_announced_and_then_resolved(dsn: str) -> None:
    with ChatReceiver() as receiver:
        notify = {
            "route": {"receiver": "ops", "group_by": ["alertname", "node"], "group_wait": "0s", "group_interval": "1s"},
            "receivers": [
                {"name": "ops", "kind": "slack", "url": f"{receiver.url}/services/T/B/x", "min_interval": "0s"}
            ],
        }
        with running_collector(dsn, rules=RULES, notify=notify, alert_tick_s=0.1) as collector:
            url, token = collector.url, collector.token
            topology = build_topology(1, 4, 1, cluster="e2e")
            source = SimNodeSource(topology[0], JobSchedule(topology, 3), 3)
            exporter = NodeExporter(
                source,
                ExporterConfig(
                    "e2e", "rack-00", topology[0].name, interval=0.2, push_url=url, token=token, push_interval=0
                ),
            )
            exporter.start()
            try:
                # The scenario, and something that must NOT happen: healthy for a while, nothing is sent.
                time.sleep(2 * INTERVAL_S)
                assert receiver.at("/services/T/B/x") == []
                fault = time.monotonic()
                source.fail_cooling(2, 60.0)  # idle at ~33 C: now ~93 C
                (firing,) = receiver.wait_for("/services/T/B/x", 1, timeout=FOR_S + 10)
                delay = firing.at - fault
                assert delay <= FOR_S + 2 * INTERVAL_S, f"delivered {delay:.2f} s after the fault"
                assert delay >= FOR_S, "not before the condition held for `for`"
                assert firing.body["text"] == "[FIRING:1] WARNING GpuOverTemperature"
                assert f"GPU 2 on {topology[0].name} is at" in firing.body["blocks"][1]["text"]["text"]
                alerts = httpx.get(f"{url}/api/v1/alerts", params={"state": "firing"}).json()
                assert [(a["alertname"], a["labels"]["gpu"]) for a in alerts] == [("GpuOverTemperature", "2")]

                repaired = time.monotonic()
                source.fail_cooling(2, 0.0)
                _, resolved = receiver.wait_for("/services/T/B/x", 2, timeout=10)
                assert resolved.body["text"] == "[RESOLVED] GpuOverTemperature"
                assert resolved.at - repaired <= 1 + 2 * INTERVAL_S
                print(
                    f"fault -> firing message {delay:.2f} s; repair -> resolved message {resolved.at - repaired:.2f} s"
                )
            finally:
                exporter.stop()
    assert len(receiver.at("/services/T/B/x")) == 2, "nothing sent twice"
