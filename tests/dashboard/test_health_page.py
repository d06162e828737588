"""The Health page in real headless Chromium over a real database holding what the health loop writes
(health_node, health_evidence, health_transition, health_action, health_episode, written here with SQL):
the count of nodes per state, each a link that filters the list (the filter in the URL), the nodes not
healthy with their evidence and links to their pages, the audit trail, the episodes and the repairs by
cause over the range, the empty states, and a hostile node name and reason shown literally."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlsplit

import psycopg
import pytest

from gpuscope.bench.browser import console_errors, open_page, screenshot, wait_until
from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.dashboard.pages.health import HealthView
from gpuscope.dashboard_process import DashboardSettings
from tests.conftest import new_database, require_tool
from tests.dashboard.helpers import running_dashboard, serving
from tests.dashboard.test_colour_schemes import LOOK_JS, check_legible, switch_to
from tests.health.episode_rows import add_episode

HOSTILE = "<img src=x onerror=window.pwned=1>{window.pwned=2}"
HEALTHY = ("node-01", "node-02", "node-03", "node-04", "node-12")  # node-12 held by an operator
TROUBLED = ["node-21", "node-17", "node-09", HOSTILE, "node-05"]  # least healthy first, then the newest
XID_79 = "XID 79 (GPU has fallen off the bus) on GPU 3"
DRAIN = 'scontrol update nodename=node-17 state=drain reason="gpuscope: XID 79 GPU 3"'
REFUSED = "drain refused: 1 node(s) already out of service by gpuscope, the policy allows 1 (max_drained 1)"


@dataclass(frozen=True)
class Site:
    url: str
    dsn: str


class Seeded:
    """When the fleet was written (by the fixture, not at import: a long suite collects minutes earlier)."""

    at = datetime.now(UTC)


def ago(**delta: float) -> datetime:
    return Seeded.at - timedelta(**delta)


def add_node(conn: psycopg.Connection[Any], name: str, gpus: int = 8) -> int:
    row = conn.execute("INSERT INTO node (cluster, name, rack) VALUES ('c', %s, 'r1') RETURNING node_id", [name])
    node_id = int(row.fetchone()[0])  # type: ignore[index]
    for index in range(gpus):
        conn.execute(
            "INSERT INTO gpu (node_id, gpu_index, uuid, model, pci_bus_id) VALUES (%s, %s, %s, 'H100', '0')",
            [node_id, index, f"GPU-{name}-{index}"],
        )
    return node_id


def gpu_id(conn: psycopg.Connection[Any], node_id: int, index: int) -> int:
    return int(
        conn.execute("SELECT gpu_id FROM gpu WHERE node_id = %s AND gpu_index = %s", [node_id, index]).fetchone()[0]
    )  # type: ignore[index]


def state(
    conn: psycopg.Connection[Any], node_id: int, to: str, since: datetime, reason: str, held: str | None = None
) -> None:
    conn.execute(
        "INSERT INTO health_node (node_id, state, since, reason, held_by) VALUES (%s, %s, %s, %s, %s)",
        [node_id, to, since, reason, held],
    )


def moved(
    conn: psycopg.Connection[Any], node_id: int, at: datetime, frm: str, to: str, reason: str, actor: str = "gpuscope"
) -> None:
    conn.execute(
        "INSERT INTO health_transition (at, node_id, from_state, to_state, reason, actor)"
        " VALUES (%s, %s, %s, %s, %s, %s)",
        [at, node_id, frm, to, reason, actor],
    )


def found(conn: psycopg.Connection[Any], node_id: int, at: datetime, gpu: int | None, kind: str, code: int | None,
          severity: str, action: str, detail: str) -> None:  # fmt: skip
    conn.execute(
        "INSERT INTO health_evidence (at, node_id, gpu_id, kind, code, severity, action, detail)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        [at, node_id, None if gpu is None else gpu_id(conn, node_id, gpu), kind, code, severity, action, detail],
    )


def acted(
    conn: psycopg.Connection[Any], node_id: int, at: datetime, action: str, dry_run: bool, ok: bool | None, detail: str
) -> None:
    conn.execute(
        "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
        " VALUES (%s, %s, %s, 'slurm', %s, %s, %s)",
        [at, node_id, action, dry_run, ok, detail],
    )


def load_fleet(dsn: str) -> None:
    """The fleet as the health loop would have left it: one node of each state, one held, a hostile one."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        ids = {name: add_node(conn, name) for name in (*HEALTHY, "node-17", "node-21", "node-05", "node-09", HOSTILE)}
        # node-17: healthy again 2 days ago after an old XID 48 (not this episode's), then XID 79 and drained.
        found(conn, ids["node-17"], ago(days=3), 1, "xid", 48, "unhealthy", "reset_gpu", "XID 48 on GPU 1 (old)")
        moved(conn, ids["node-17"], ago(days=2), "validating", "healthy", "validated and resumed")
        found(conn, ids["node-17"], ago(minutes=21), 3, "xid", 79, "unhealthy", "reboot_node", XID_79)
        found(conn, ids["node-17"], ago(minutes=25), 3, "xid", 13, "ignore", "app_error", "XID 13 on GPU 3")
        moved(conn, ids["node-17"], ago(minutes=20), "healthy", "unhealthy", XID_79)
        acted(conn, ids["node-17"], ago(minutes=19), "drain", False, True, DRAIN)
        moved(conn, ids["node-17"], ago(minutes=19), "unhealthy", "drained", XID_79 + "; 2 jobs affected")
        state(conn, ids["node-17"], "drained", ago(minutes=19), XID_79 + "; 2 jobs affected")
        # node-21: a failed row remap, the drain refused by the policy's limit.
        found(
            conn,
            ids["node-21"],
            ago(minutes=10),
            1,
            "remap_failed",
            None,
            "unhealthy",
            "drain_rma",
            "row remap failed on GPU 1",
        )
        moved(conn, ids["node-21"], ago(minutes=10), "healthy", "unhealthy", "row remap failed on GPU 1")
        acted(conn, ids["node-21"], ago(minutes=10), "refused", False, None, REFUSED)
        state(conn, ids["node-21"], "unhealthy", ago(minutes=10), REFUSED)
        # node-05 and the hostile node: suspect.
        found(
            conn,
            ids["node-05"],
            ago(hours=2),
            0,
            "nvlink_flap",
            None,
            "suspect",
            "check_link",
            "NVLink 2 of GPU 0 went down 3 times in 10 min",
        )
        for minutes in range(1, 7):  # seven findings in all: the older two fold away
            detail = f"NVLink 2 of GPU 0 down again ({minutes} min later)"
            found(
                conn,
                ids["node-05"],
                ago(minutes=120 - minutes),
                0,
                "nvlink_flap",
                None,
                "suspect",
                "check_link",
                detail,
            )
        moved(conn, ids["node-05"], ago(hours=2), "healthy", "suspect", "NVLink 2 of GPU 0 went down 3 times")
        state(conn, ids["node-05"], "suspect", ago(hours=2), "NVLink 2 of GPU 0 went down 3 times")
        found(conn, ids[HOSTILE], ago(hours=1), 2, "thermal_slowdown", None, "suspect", "check_cooling", HOSTILE)
        moved(conn, ids[HOSTILE], ago(hours=1), "healthy", "suspect", HOSTILE)
        state(conn, ids[HOSTILE], "suspect", ago(hours=1), HOSTILE)
        # node-09: quiet since its XID 48, validating; an old transition outside the last 24 h.
        found(conn, ids["node-09"], ago(hours=30), 5, "xid", 48, "unhealthy", "reset_gpu", "XID 48 on GPU 5")
        moved(conn, ids["node-09"], ago(hours=30), "healthy", "unhealthy", "XID 48 on GPU 5")
        moved(conn, ids["node-09"], ago(minutes=5), "drained", "validating", "quiet for 30 min, every GPU reporting up")
        state(conn, ids["node-09"], "validating", ago(minutes=5), "quiet for 30 min, every GPU reporting up")
        # node-12: healthy, held by an operator.
        state(conn, ids["node-12"], "healthy", ago(hours=3), "", held="alice: fan swap, INC-4411")
        conn.execute(
            "INSERT INTO health_action (at, node_id, action, scheduler, dry_run, ok, detail)"
            " VALUES (%s, %s, 'hold', 'none', false, true, 'held by alice: fan swap, INC-4411')",
            [ago(hours=3), ids["node-12"]],
        )
        load_episodes(conn, ids)


def load_episodes(conn: psycopg.Connection[Any], ids: dict[str, int]) -> None:
    """node-02 back 20 h ago after a GPU reset, out again 10 h ago (a failure within 7 days); node-03's
    GPU 2 out alone, its check naming a failing test; node-17 out now; the hostile node suspect now."""
    reset = {"repair": "reset_gpu", "rung": 0}
    add_episode(conn, ids["node-02"], "xid:48", ago(hours=26), ago(hours=25), ago(hours=20), "returned", gpus_out=8,
                **reset)  # fmt: skip
    add_episode(conn, ids["node-02"], "xid:48", ago(hours=10), ago(hours=10), ago(hours=4), "returned", gpus_out=8,
                repair="reboot_node", rung=1)  # fmt: skip
    add_episode(conn, ids["node-03"], "ecc_uncorrectable", ago(hours=20), ago(hours=19.5), ago(hours=12), "returned",
                scope="gpu", gpu_id=gpu_id(conn, ids["node-03"], 2), gpus_out=1, validation="failed: dcgmi diag",
                failed_test="memory bandwidth", **reset)  # fmt: skip
    add_episode(conn, ids["node-17"], "xid:79", ago(minutes=21), ago(minutes=19), None, "open", gpus_out=8,
                gpu_id=gpu_id(conn, ids["node-17"], 3), repair="reboot_node", rung=1)  # fmt: skip
    conn.execute(
        "INSERT INTO health_episode (node_id, gpu_id, cause, cause_detail, started_at, failed_test)"
        " VALUES (%s, %s, 'thermal_slowdown', %s, %s, %s)",
        [ids[HOSTILE], gpu_id(conn, ids[HOSTILE], 2), HOSTILE, ago(hours=1), HOSTILE],
    )


@pytest.fixture(scope="module")
def site(postgres: EmbeddedPostgres) -> Iterator[Site]:
    require_tool("chromium")
    require_tool("chromedriver")
    dsn = new_database(postgres)
    Seeded.at = datetime.now(UTC)
    load_fleet(dsn)
    with running_dashboard(DashboardSettings(db=dsn, listen="127.0.0.1:0", refresh_ms=60_000)) as url:
        yield Site(url, dsn)


def text(element: Any) -> str:
    """What the element says, as written (the badges' CSS shows it in capitals)."""
    return str(element.get_attribute("textContent")).strip()


def table_rows(browser: Any, table_id: str) -> list[list[Any]]:
    rows = browser.find_elements("css selector", f"#{table_id} > tbody > tr")
    return [row.find_elements("css selector", ":scope > td") for row in rows]


def listed(browser: Any) -> list[str]:
    return [text(cells[0]) for cells in table_rows(browser, "health-nodes-table")]


def verdicts(cell: Any) -> list[str]:
    return [text(part) for part in cell.find_elements("css selector", ".gpu-verdicts > span")]


def count(browser: Any, key: str) -> int:
    return int(browser.find_element("id", f"health-{key}-value").text)


def test_counts_nodes_evidence_and_hostile_text(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/health")
    counts = {
        key: count(browser, key)
        for key in ("troubled", "healthy", "suspect", "unhealthy", "drained", "validating", "held")
    }
    assert counts == {
        "troubled": 5,
        "healthy": 5,
        "suspect": 2,
        "unhealthy": 1,
        "drained": 1,
        "validating": 1,
        "held": 1,
    }
    assert listed(browser) == TROUBLED
    rows = {text(cells[0]): cells for cells in table_rows(browser, "health-nodes-table")}
    node, badge, since, reason, held, gpus, evidence = rows["node-17"]
    assert text(held) == ""
    assert text(badge) == "drained" and "state-drained" in badge.find_element("css selector", "span").get_attribute(
        "class"
    )
    assert re.fullmatch(r"(19|20) min ago", text(since)), text(since)
    assert text(reason) == XID_79 + "; 2 jobs affected"
    assert verdicts(gpus) == ["GPU 3 unhealthy", "7 healthy"]
    lines = [
        [text(td) for td in tr.find_elements("css selector", "td")]
        for tr in evidence.find_elements("css selector", "tr")
    ]
    assert [line[1:] for line in lines] == [
        ["unhealthy", XID_79, "reboot_node"],
        ["ignore", "XID 13 on GPU 3", "app_error"],
    ], "this episode's findings, newest first; the XID 48 before its return to healthy is not shown"
    assert lines[0][0] == f"{ago(minutes=21):%m-%d %H:%M:%S}"
    assert node.find_element("tag name", "a").get_attribute("href") == site.url + "/node/node-17"
    assert text(rows["node-21"][3]) == REFUSED
    assert verdicts(rows["node-09"][5]) == ["GPU 5 unhealthy", "7 healthy"], "not healthy again since its XID 48"
    assert verdicts(rows["node-05"][5]) == ["GPU 0 suspect", "7 healthy"]
    folded = rows["node-05"][6].find_element("tag name", "details")
    assert text(folded.find_element("tag name", "summary")) == "2 older" and not folded.get_attribute("open")
    newest = [text(tr) for tr in rows["node-05"][6].find_elements("css selector", ":scope > table.evidence tr")]
    assert len(newest) == 5 and "(6 min later)" in newest[0] and len(folded.find_elements("css selector", "tr")) == 2
    # The hostile name, reason and finding are text, its link goes to its (quoted) node page.
    hostile = rows[HOSTILE]
    assert text(hostile[3]) == HOSTILE and HOSTILE in text(hostile[6])
    link = hostile[0].find_element("tag name", "a")
    assert link.get_attribute("href") == site.url + "/node/" + quote(HOSTILE, safe="")
    assert browser.execute_script("return window.pwned") is None
    assert not browser.find_elements("css selector", "#page img")
    screenshot(browser, "health", whole_page=True)
    assert console_errors(browser) == []


def test_a_count_filters_the_list_and_the_url_keeps_it(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/health")
    browser.find_element("css selector", "#health-drained a").click()
    wait_until(browser, lambda: "state=drained" in browser.current_url, 10, "the state in the URL")
    wait_until(browser, lambda: listed(browser) == ["node-17"], 10, "only the drained node")
    assert "health-card-chosen" in browser.find_element("id", "health-drained").get_attribute("class")
    assert browser.find_element("css selector", "#health-nodes h3").text == "Nodes drained"
    browser.find_element("css selector", "#health-held a").click()
    wait_until(browser, lambda: listed(browser) == ["node-12"], 10, "the held node")
    assert "state=held" in browser.current_url
    assert text(table_rows(browser, "health-nodes-table")[0][4]) == "alice: fan swap, INC-4411"
    browser.find_element("css selector", "#health-healthy a").click()
    wait_until(browser, lambda: sorted(listed(browser)) == sorted(HEALTHY), 10, "the healthy nodes")
    # A shared address opens filtered; a node's name opens its page.
    open_page(browser, site.url + "/health?state=validating")
    assert listed(browser) == ["node-09"]
    browser.find_element("link text", "node-09").click()
    wait_until(browser, lambda: urlsplit(browser.current_url).path == "/node/node-09", 10, "the node's page")
    open_page(browser, site.url + "/health?state=unhealthy&range=24h")
    assert listed(browser) == ["node-21"]
    assert console_errors(browser) == []


def test_the_audit_trail_follows_the_range(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/health?range=24h")
    transitions = [[text(td) for td in cells[1:]] for cells in table_rows(browser, "health-transitions-table")]
    assert transitions[:3] == [
        ["node-09", "drained", "→", "validating", "gpuscope", "quiet for 30 min, every GPU reporting up"],
        ["node-21", "healthy", "→", "unhealthy", "gpuscope", "row remap failed on GPU 1"],
        ["node-17", "unhealthy", "→", "drained", "gpuscope", XID_79 + "; 2 jobs affected"],
    ]
    assert len(transitions) == 6 and all("XID 48" not in row[-1] for row in transitions), "30 h ago: not in 24 h"
    actions = [[text(td) for td in cells[1:]] for cells in table_rows(browser, "health-actions-table")]
    assert actions == [
        ["node-21", "refused", "slurm", "live", "not run", REFUSED],
        ["node-17", "drain", "slurm", "live", "ok", DRAIN],
        ["node-12", "hold", "none", "live", "ok", "held by alice: fan swap, INC-4411"],
    ]
    screenshot(browser, "health-audit", whole_page=True)
    browser.find_element("css selector", "#health-range input[value='7d']").click()
    wait_until(browser, lambda: "range=7d" in browser.current_url, 10, "the range in the URL")
    wait_until(browser, lambda: len(table_rows(browser, "health-transitions-table")) == 8, 10, "the older transitions")
    older = [text(cells[-1]) for cells in table_rows(browser, "health-transitions-table")]
    assert older[-2:] == ["XID 48 on GPU 5", "validated and resumed"]
    assert console_errors(browser) == []


def test_episodes_and_repairs_by_cause_over_the_range(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/health?range=24h")
    episodes = [[text(td) for td in cells[1:11]] for cells in table_rows(browser, "health-episodes-table")]
    assert [row[0] for row in episodes] == ["node-17", HOSTILE, "node-02", "node-03", "node-02"], "newest first"
    now_out, hostile, again, alone, first = episodes
    assert now_out[1:4] == ["GPU 3", "xid:79", "reboot_node"] and now_out[6:] == ["open", "?", "?", ""]
    assert re.fullmatch(r"(19|20) min", now_out[4]), now_out
    assert hostile == [HOSTILE, "GPU 2", "thermal_slowdown", "-", "-", "0.0", "open", "?", "?", HOSTILE]
    assert again == ["node-02", "node", "xid:48", "reboot_node", "6 h 0 min", "48.0", "returned", "?", "?", ""]
    assert alone == ["node-03", "GPU 2 (out alone)", "ecc_uncorrectable", "reset_gpu", "7 h 30 min", "7.5",
                     "returned", "?", "?", "memory bandwidth"]  # fmt: skip
    assert first == ["node-02", "node", "xid:48", "reset_gpu", "5 h 0 min", "40.0", "returned", "yes", "yes", ""]
    assert browser.execute_script("return window.pwned") is None
    repairs = [[text(td) for td in cells] for cells in table_rows(browser, "health-repairs-table")]
    assert repairs == [
        ["ecc_uncorrectable", "reset_gpu", "1", "0", "0", "1", "-", "0", "0", "1", "-"],
        ["xid:48", "reboot_node", "1", "0", "0", "1", "-", "0", "0", "1", "-"],
        ["xid:48", "reset_gpu", "1", "0", "1", "0", "0%", "0", "1", "0", "0%"],
    ]
    screenshot(browser, "health-episodes", whole_page=True)
    open_page(browser, site.url + "/health?range=15m")
    assert [text(cells[1]) for cells in table_rows(browser, "health-episodes-table")] == ["node-17", HOSTILE]
    assert "No failure came back into service in this range." in browser.find_element("id", "health-repairs").text
    assert console_errors(browser) == []


def test_badges_and_cards_read_in_both_schemes(site: Site, browser: Any) -> None:
    open_page(browser, site.url + "/health")
    for scheme in ("dark", "light"):  # light last: the browser keeps the choice for the tests after this one
        switch_to(browser, scheme)
        open_page(browser, site.url + "/health")  # a reload: the page as the kept choice draws it
        check_legible(browser.execute_script(LOOK_JS), scheme, "health")
        screenshot(browser, f"health-{scheme}", whole_page=True)


def test_empty_states_say_what_they_mean(postgres: EmbeddedPostgres, browser: Any) -> None:
    dsn = new_database(postgres)
    with running_dashboard(DashboardSettings(db=dsn, listen="127.0.0.1:0", refresh_ms=60_000)) as url:
        open_page(browser, url + "/health")
        status = browser.find_element("id", "health-status").text
        assert (
            status.startswith("No health data yet: the health loop runs in the collector")
            and "none has reported" in status
        )
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = [add_node(conn, name, gpus=2) for name in ("a", "b", "c")]
        open_page(browser, url + "/health")
        assert "has recorded nothing: all 3 nodes count as healthy" in browser.find_element("id", "health-status").text
        assert browser.find_element("id", "health-nodes").text.endswith("All 3 nodes healthy.")
        assert "No transition in this range." in browser.find_element("id", "health-transitions").text
        with psycopg.connect(dsn, autocommit=True) as conn:
            moved(conn, ids[0], ago(minutes=1), "suspect", "healthy", "no new evidence for 1 h")
            state(conn, ids[0], "healthy", ago(minutes=1), "no new evidence for 1 h")
        open_page(browser, url + "/health?state=drained")
        assert browser.find_element("id", "health-status").text == ""
        assert browser.find_element("id", "health-nodes").text.endswith("No node is drained.")
        assert count(browser, "troubled") == 0 and count(browser, "healthy") == 3
        assert console_errors(browser) == []


def test_an_unreachable_database_is_a_banner(browser: Any) -> None:
    with serving() as url:
        open_page(browser, url + "/health")
        assert "Database unreachable" in browser.find_element("id", "health-status").text


def test_the_view_comes_from_the_url() -> None:
    assert HealthView.from_search("?state=drained&range=7d") == HealthView("drained", "7d")
    assert HealthView.from_search("?state=<b>&range=forever") == HealthView("", "24h")
    assert HealthView("held", "1h").href() == "/health?state=held&range=1h"
    assert HealthView("", "24h").href() == "/health?range=24h"
