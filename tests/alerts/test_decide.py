"""Alertmanager's notification semantics, decided without a database: group_wait, group_interval,
repeat_interval, alerts joining a group, send_resolved, silences, inhibition, routing and grouping.
The groups' rows live in a dict here, written back as store.write_decision writes them."""

from __future__ import annotations

import ast
import datetime as dt
import importlib.util
from pathlib import Path

from gpuscope.alerts.config import NotifyConfig, parse_notify_config
from gpuscope.alerts.decide import ALERTMANAGER_REPEAT_S, Decision, GroupId, GroupRow, Notification, decide
from gpuscope.alerts.silences import Silence
from gpuscope.alerts.state import Instance
from tests.alerts.instances import T0, alert, config, silence


class Memory:
    """The engine's alerts, and decide() at chosen times over groups kept in memory."""

    def __init__(self, cfg: NotifyConfig, *silences: Silence) -> None:
        self.cfg, self.silences = cfg, list(silences)
        self.alerts: dict[str, Instance] = {}
        self.rows: dict[GroupId, GroupRow] = {}
        self.sent: list[Notification] = []
        self.last = Decision()

    def set(self, *instances: Instance) -> None:
        for i in instances:
            self.alerts[i.fingerprint] = i

    def at(self, seconds: float) -> int:
        now = T0 + dt.timedelta(seconds=seconds)
        self.last = decide(self.alerts, self.cfg, list(self.rows.values()), self.silences, now)
        for key in self.last.deletes:
            del self.rows[key]  # decide deletes only rows it was given
        for row in self.last.upserts:
            self.rows[row.key] = row
        self.sent += self.last.notifications
        return len(self.last.notifications)

    def outbox(self) -> list[tuple[str, int, int, list[str]]]:
        return [
            (n.receiver, n.firing, n.resolved, sorted(f"{a.labels['node']}:{a.status}" for a in n.message.alerts))
            for n in self.sent
        ]


def test_a_new_group_waits_group_wait() -> None:
    mem = Memory(config())
    mem.set(alert("Hot", "n1"), alert("Hot", "n2"))
    assert mem.at(0) == 0
    [row] = mem.last.upserts
    assert (row.receiver, row.group_labels, row.created_at, row.notified_at) == ("ops", {"alertname": "Hot"}, T0, None)
    assert mem.at(29) == 0 and mem.last.upserts == [], "nothing changed: nothing to write"
    assert mem.at(30) == 1
    assert mem.outbox() == [("ops", 2, 0, ["n1:firing", "n2:firing"])]
    [row] = mem.last.upserts
    assert row.notified_at == T0 + dt.timedelta(seconds=30)
    assert row.firing_sent == tuple(sorted(a.fingerprint for a in mem.alerts.values()))


def test_a_new_alert_joins_the_group_after_group_interval() -> None:
    mem = Memory(config(group_wait="0s"))
    mem.set(alert("Hot", "n1"))
    assert mem.at(0) == 1
    mem.set(alert("Hot", "n2", at=T0 + dt.timedelta(seconds=40)))
    assert mem.at(40) == 0 and mem.at(299) == 0, "a change waits for group_interval"
    assert mem.at(300) == 1
    assert mem.outbox()[-1] == ("ops", 2, 0, ["n1:firing", "n2:firing"])
    assert mem.at(301) == 0


def test_an_unchanged_group_is_repeated_after_repeat_interval() -> None:
    mem = Memory(config(group_wait="0s"))
    mem.set(alert("Hot", "n1"))
    assert mem.at(0) == 1
    assert mem.at(300) == 0 and mem.at(4 * 3600 - 1) == 0, "unchanged: group_interval alone says nothing"
    assert mem.at(4 * 3600) == 1
    assert mem.outbox() == [("ops", 1, 0, ["n1:firing"])] * 2
    assert mem.at(4 * 3600 + 300) == 0, "the timer starts again"


def test_repeat_interval_is_capped_for_alertmanager_receivers() -> None:
    mem = Memory(config(receiver="am", group_wait="0s", group_interval="10s"))
    mem.set(alert("Hot", "n1"))
    assert mem.at(0) == 1
    assert mem.at(ALERTMANAGER_REPEAT_S - 1) == 0
    assert mem.at(ALERTMANAGER_REPEAT_S) == 1, "else Alertmanager forgets the alert at its endsAt"


def test_resolved_alerts_are_announced_then_the_group_closes() -> None:
    mem = Memory(config(group_wait="0s"))
    mem.set(alert("Hot", "n1"), alert("Hot", "n2"))
    assert mem.at(0) == 1
    mem.set(alert("Hot", "n1", state="resolved", at=T0 + dt.timedelta(seconds=60)))
    assert mem.at(60) == 0 and mem.at(299) == 0, "a resolution waits for group_interval too"
    assert mem.at(300) == 1
    assert mem.outbox()[-1] == ("ops", 1, 1, ["n1:resolved", "n2:firing"])
    resolved = next(a for a in mem.last.notifications[0].message.alerts if a.status == "resolved")
    assert resolved.ends_at == "2026-11-22T12:01:00Z"
    mem.set(alert("Hot", "n2", state="resolved", at=T0 + dt.timedelta(seconds=400)))
    assert mem.at(600) == 1
    assert mem.outbox()[-1] == ("ops", 0, 1, ["n2:resolved"])
    assert mem.last.deletes == [("ops", mem.last.notifications[0].group_key)] and mem.rows == {}, "the group is done"
    assert mem.at(9000) == 0


def test_without_send_resolved_nothing_is_said_when_alerts_resolve() -> None:
    mem = Memory(config(receiver="quiet", group_wait="0s"))
    n1, n2 = alert("Hot", "n1"), alert("Hot", "n2")
    mem.set(n1, n2)
    assert mem.at(0) == 1
    mem.set(alert("Hot", "n1", state="resolved"))
    assert mem.at(300) == 0
    [row] = mem.rows.values()
    assert row.firing_sent == (n2.fingerprint,) and row.notified_at == T0, "forgotten, not announced"
    mem.set(alert("Hot", "n2", state="resolved"))
    assert mem.at(600) == 0 and mem.rows == {}
    assert [r[0] for r in mem.outbox()] == ["quiet"]


def test_without_send_resolved_a_notification_shows_only_firing_alerts() -> None:
    for receiver, shown in (("quiet", ("quiet", 2, 0, ["n2:firing", "n3:firing"])),
                            ("ops", ("ops", 2, 1, ["n1:resolved", "n2:firing", "n3:firing"]))):  # fmt: skip
        mem = Memory(config(receiver=receiver, group_wait="0s"))
        mem.set(alert("Hot", "n1"), alert("Hot", "n2"))
        assert mem.at(0) == 1
        mem.set(alert("Hot", "n1", state="resolved", at=T0 + dt.timedelta(seconds=60)), alert("Hot", "n3"))
        assert mem.at(300) == 1 and mem.outbox()[-1] == shown


def test_a_group_whose_alerts_go_before_group_wait_says_nothing() -> None:
    mem = Memory(config())
    mem.set(alert("Hot", "n1"))
    assert mem.at(0) == 0 and len(mem.rows) == 1
    mem.set(alert("Hot", "n1", state="resolved", at=T0 + dt.timedelta(seconds=10)))
    assert mem.at(10) == 0 and mem.rows == {} and mem.sent == []


def test_pending_alerts_are_not_notified() -> None:
    mem = Memory(config(group_wait="0s"))
    mem.set(alert("Hot", "n1", state="pending"))
    assert mem.at(0) == 0 and mem.rows == {}


def test_an_active_silence_mutes_and_one_not_yet_started_or_ended_does_not() -> None:
    mem = Memory(config(group_wait="0s"), silence("node=n1", starts=-60, ends=100))
    mem.set(alert("Hot", "n1"), alert("Cold", "n1"), alert("Hot", "n2"))
    assert mem.at(0) == 1 and mem.outbox() == [("ops", 1, 0, ["n2:firing"])]
    assert mem.at(99) == 0
    assert mem.at(100) == 1 and mem.outbox()[-1] == ("ops", 1, 0, ["n1:firing"]), "ended: Cold is a new group"
    assert mem.at(300) == 1 and mem.outbox()[-1] == ("ops", 2, 0, ["n1:firing", "n2:firing"]), "Hot on n1 joins"

    later = Memory(config(group_wait="0s"), silence("node=n1", starts=60))
    later.set(alert("Hot", "n1"))
    assert later.at(0) == 1, "the silence has not started"


def test_an_alert_silenced_after_it_was_sent_leaves_the_group_quietly() -> None:
    mem = Memory(config(group_wait="0s"))
    n1, n2 = alert("Hot", "n1"), alert("Hot", "n2")
    mem.set(n1, n2)
    assert mem.at(0) == 1
    mem.silences.append(silence("node=n1"))
    assert mem.at(300) == 0
    [row] = mem.rows.values()
    assert row.firing_sent == (n2.fingerprint,)


def test_a_down_node_inhibits_its_other_alerts_with_equal_labels() -> None:
    mem = Memory(config(group_wait="0s", group_by=["..."]))
    mem.set(alert("ExporterDown", "n1"), alert("Hot", "n1"), alert("Hot", "n2"))
    assert mem.at(0) == 2
    assert sorted((n.message.group_labels["alertname"], n.message.group_labels["node"]) for n in mem.sent) == [
        ("ExporterDown", "n1"), ("Hot", "n2"),
    ], "Hot on n1 is inhibited; Hot on n2 has another node"  # fmt: skip


def test_only_firing_sources_inhibit_and_silenced_ones_still_do() -> None:
    mem = Memory(config(group_wait="0s"))
    mem.set(alert("ExporterDown", "n1", state="pending"), alert("Hot", "n1"))
    assert mem.at(0) == 1 and mem.outbox() == [("ops", 1, 0, ["n1:firing"])]

    muted_source = Memory(config(group_wait="0s"), silence("alertname=ExporterDown"))
    muted_source.set(alert("ExporterDown", "n1"), alert("Hot", "n1"))
    assert muted_source.at(0) == 0, "a silenced source still inhibits, as in Alertmanager"


def test_an_alert_never_inhibits_itself() -> None:
    cfg = parse_notify_config(
        {
            "route": {"receiver": "ops", "group_by": ["..."], "group_wait": "0s"},
            "receivers": [{"name": "ops", "kind": "webhook", "url": "http://127.0.0.1:9/"}],
            "inhibit_rules": [{"source_matchers": ["severity=critical"], "target_matchers": ["severity=~.+"],
                               "equal": ["cluster"]}],
        }
    )  # fmt: skip
    mem = Memory(cfg)
    mem.set(alert("Lost", "n1", severity="critical", cluster="a"))
    assert mem.at(0) == 1, "alone, the source matches the target too and is not muted"
    mem.set(alert("Hot", "n2", severity="warning", cluster="a"), alert("Hot", "n3", severity="warning", cluster="b"))
    assert mem.at(1) == 1 and mem.sent[-1].message.group_labels["node"] == "n3", "n2 shares the cluster: inhibited"
    mem.set(alert("Lost", "n4", severity="critical", cluster="a"))
    assert mem.at(2) == 0, "n4 is inhibited by n1"
    assert mem.at(302) == 0, "and n1 by n4: its group is left with nothing to say"
    assert [row.group_labels["node"] for row in mem.rows.values()] == ["n3"]


def test_routes_send_to_several_receivers_with_continue() -> None:
    routes = [{"matchers": ["severity=critical"], "receiver": "pager", "continue": True}, {"receiver": "ops"}]
    mem = Memory(config(group_by=["alertname", "node"], group_wait="0s", routes=routes))
    mem.set(alert("Hot", "n1"), alert("Hot", "n2"), alert("Lost", "n1", severity="critical"))
    assert mem.at(0) == 4
    assert sorted(mem.outbox()) == [
        ("ops", 1, 0, ["n1:firing"]),
        ("ops", 1, 0, ["n1:firing"]),
        ("ops", 1, 0, ["n2:firing"]),
        ("pager", 1, 0, ["n1:firing"]),
    ]
    keys = [(n.receiver, n.group_key) for n in mem.sent]
    assert keys == sorted(keys), "the outbox in group order"
    assert [(r, k.split(":", 1)[0]) for r, k in keys] == [("ops", "0.1")] * 3 + [("pager", "0.0")]

    first_only = Memory(config(group_wait="0s", routes=[{"matchers": ["severity=critical"], "receiver": "pager"},
                                                        {"receiver": "ops"}]))  # fmt: skip
    first_only.set(alert("Lost", "n1", severity="critical"))
    assert first_only.at(0) == 1 and first_only.outbox() == [("pager", 1, 0, ["n1:firing"])]


def test_group_by_dots_groups_by_every_label() -> None:
    mem = Memory(config(group_wait="0s", group_by=["..."]))
    mem.set(alert("Hot", "n1", gpu="0"), alert("Hot", "n1", gpu="1"), alert("Hot", "n2", gpu="0"))
    assert mem.at(0) == 3
    assert {n.message.group_labels["gpu"] for n in mem.sent} == {"0", "1"}
    assert all(n.message.group_labels == n.message.alerts[0].labels for n in mem.sent)

    by_name = Memory(config(group_wait="0s"))
    by_name.set(alert("Hot", "n1", gpu="0"), alert("Hot", "n1", gpu="1"), alert("Hot", "n2", gpu="0"))
    assert by_name.at(0) == 1 and by_name.sent[0].message.group_labels == {"alertname": "Hot"}


def test_the_message_says_what_the_outbox_needs() -> None:
    mem = Memory(config(group_wait="0s"))
    hot = alert("Hot", "n1")
    mem.set(hot)
    mem.at(0)
    [note] = mem.sent
    assert (note.receiver, note.group_key) == ("ops", '0:[["alertname","Hot"]]')
    assert (note.message.receiver, note.message.group_key, note.message.group_labels) == (
        "ops", '0:[["alertname","Hot"]]', {"alertname": "Hot"},
    )  # fmt: skip
    [a] = note.message.alerts
    assert (a.status, a.starts_at, a.ends_at, a.fingerprint) == (
        "firing",
        "2026-11-22T12:00:00Z",
        None,
        hot.fingerprint,
    )
    assert a.generator_url == f"http://127.0.0.1:8050/alerts?fingerprint={hot.fingerprint}"


def test_stored_groups_carry_on_after_a_restart() -> None:
    first = Memory(config(group_wait="0s"))
    first.set(alert("Hot", "n1"))
    assert first.at(0) == 1
    second = Memory(config(group_wait="0s"))  # a new engine: the same rows, the same alerts loaded
    second.rows, second.alerts = dict(first.rows), dict(first.alerts)
    assert second.at(1) == 0 and second.at(299) == 0 and second.sent == []
    assert second.at(4 * 3600) == 1


def test_groups_no_longer_configured_are_forgotten() -> None:
    routes = [{"matchers": ["severity=critical"], "receiver": "pager"}]
    mem = Memory(config(group_wait="0s", routes=routes))
    mem.set(alert("Lost", "n1", severity="critical"))
    assert mem.at(0) == 1
    [before] = mem.rows
    mem.cfg = config(group_wait="0s")  # the child route is gone: the alert goes to the top route now
    assert (
        mem.at(1) == 1 and mem.last.deletes == [before] and list(mem.rows) == [("ops", before[1].replace("0.0:", "0:"))]
    )

    gone = Memory(config(group_wait="0s", receiver="pager"))
    gone.set(alert("Hot", "n1"))
    assert gone.at(0) == 1
    [before] = gone.rows
    gone.cfg = config(receivers=[{"name": "ops", "kind": "slack", "url": "http://127.0.0.1:9/ops"}])
    assert gone.at(1) == 0 and gone.last.deletes == [before] and [r[0] for r in gone.rows] == ["ops"]


def test_the_decision_module_imports_no_database_code() -> None:
    """decide.py and the modules of ours it imports at run time use neither psycopg nor the store."""
    ours, theirs = set(), set()
    todo = ["gpuscope.alerts.decide"]
    while todo:
        name = todo.pop()
        if name in ours:
            continue
        ours.add(name)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        todo += [name.rsplit(".", i)[0] for i in range(1, name.count(".") + 1)]  # its packages run too
        for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:  # TYPE_CHECKING skipped
            if isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                found = [node.module] + [
                    f"{node.module}.{a.name}" for a in node.names if _is_module(node.module, a.name)
                ]
            else:
                continue
            todo += [n for n in found if n.startswith("gpuscope.")]
            theirs |= {n.split(".")[0] for n in found if not n.startswith("gpuscope.")}
    assert {"gpuscope.alerts.decide", "gpuscope.alerts.state", "gpuscope.alerts.silences"} <= ours
    assert not {"gpuscope.alerts.store", "gpuscope.alerts.evaluate", "gpuscope.alerts.dispatch"} & ours
    assert not {"psycopg", "psycopg_pool", "httpx", "socket", "asyncio"} & theirs


def _is_module(package: str, name: str) -> bool:
    spec = importlib.util.find_spec(package)
    locations = (spec.submodule_search_locations if spec else None) or []
    return any((Path(p) / f"{name}.py").exists() or (Path(p) / name).is_dir() for p in locations)
