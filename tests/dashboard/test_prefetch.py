"""The overview's contents loaded ahead while a first visit's browser compiles its scripts: started by a
browser's page request alone (never a probe's, never one the login refused), one load at a time, each
result taken once while fresh."""

from __future__ import annotations

import base64
import threading
from typing import Any

import pytest

from gpuscope.dashboard.app import create_app
from gpuscope.dashboard.auth import hash_password
from gpuscope.dashboard.prefetch import Prefetch

BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8", "Sec-Fetch-Dest": "document"}
OLD_BROWSER = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}  # no fetch metadata (plain http, not local)
PROBE = {"Accept": "*/*"}  # kube-probe, curl
SCRIPT = {"Accept": "*/*", "Sec-Fetch-Dest": "empty"}  # the page's own fetches


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_load_is_taken_once_while_fresh_and_only_for_its_key() -> None:
    clock = Clock()
    prefetch = Prefetch(lambda key: f"contents of {key}", fresh_s=3.0, clock=clock)
    assert prefetch.take("1h") is None, "nothing started"
    assert prefetch.start("1h")
    assert prefetch.take("6h") is None, "another range's"
    clock.now += 2.9
    assert prefetch.take("1h") == "contents of 1h"
    assert prefetch.take("1h") is None, "taken already"
    assert prefetch.start("1h")
    clock.now += 3.1
    assert prefetch.take("1h") is None, "too old: the layout loads it afresh"


def test_one_load_at_a_time_and_a_failed_load_raises_where_it_is_taken() -> None:
    release = threading.Event()

    def load(key: str) -> str:
        release.wait(10)
        raise RuntimeError(f"load of {key} failed")

    prefetch = Prefetch(load)
    assert prefetch.start("1h")
    assert not prefetch.start("1h"), "the first is still running"
    assert not prefetch.start("6h")
    release.set()
    with pytest.raises(RuntimeError, match="load of 1h failed"):
        prefetch.take("1h")  # waits for the running load
    assert prefetch.loads_started == 1


def _started(app: Any) -> int:
    prefetch = app.server.extensions["gpuscope_overview"]
    assert isinstance(prefetch, Prefetch)
    return prefetch.loads_started


@pytest.mark.parametrize(
    ("path", "headers", "loads"),
    [
        ("/", BROWSER, 1),
        ("/?range=6h", OLD_BROWSER, 1),
        ("/", PROBE, 0),
        ("/", SCRIPT, 0),
        ("/?range=2026-11-20T08:00..2026-11-21T08:00", BROWSER, 0),  # loaded by the layout itself
        ("/heatmap", BROWSER, 0),  # another page
    ],
)
def test_only_a_browser_opening_the_overview_starts_a_load(path: str, headers: dict[str, str], loads: int) -> None:
    app = create_app(pool=None)  # type: ignore[arg-type]  # a started load fails on it: counted all the same
    app.server.test_client().get(path, headers=headers)
    assert _started(app) == loads


def test_a_request_the_login_refuses_starts_nothing() -> None:
    app = create_app(pool=None, users={"ops": hash_password("right password", iterations=1000)})  # type: ignore[arg-type]
    client = app.server.test_client()
    wrong = base64.b64encode(b"ops:wrong").decode()
    assert client.get("/", headers=BROWSER).status_code == 401
    assert client.get("/", headers=BROWSER | {"Authorization": f"Basic {wrong}"}).status_code == 401
    assert _started(app) == 0
    right = base64.b64encode(b"ops:right password").decode()
    assert client.get("/", headers=BROWSER | {"Authorization": f"Basic {right}"}).status_code == 200
    assert _started(app) == 1
