"""A browser's password is hashed once, not on every request (dashboard/login_cache.py); a wrong one
is hashed every time and never cached; a changed password file counts at the next request; failed
logins are limited per address (dashboard/login_throttle.py). Hashes are counted by wrapping
auth.verify, the one function that runs PBKDF2, on the real server."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpuscope.dashboard import auth
from gpuscope.dashboard.login_cache import VerifiedLogins
from gpuscope.dashboard.login_throttle import BURST, FailureThrottle
from tests.dashboard.helpers import serving

# What a browser asks for on opening a page: the page, Dash's layout and callback graph (and scripts).
BROWSER_REQUESTS = ("/", "/_dash-layout", "/_dash-dependencies")


class Counted:
    def __init__(self) -> None:
        self.hashes = 0
        self._verify = auth.verify

    def __call__(self, *args: Any) -> bool:
        self.hashes += 1
        return self._verify(*args)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Counted:
    counted = Counted()
    monkeypatch.setattr(auth, "verify", counted)
    return counted


def write_users(path: Path, **passwords: str) -> None:
    """Written aside and renamed in, as editors and config tools do."""
    aside = path.with_suffix(".new")
    aside.write_text("".join(f"{user}:{auth.hash_password(pw, iterations=1000)}\n" for user, pw in passwords.items()))
    os.replace(aside, path)


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    users = tmp_path / "users"
    write_users(users, ada="correct horse", bob="battery staple")
    with serving(users=auth.read_users(users)) as url:
        yield url, users


def status(url: str, credentials: tuple[str, str] | None, client: httpx.Client | None = None) -> int:
    return (client or httpx).get(url, auth=credentials, timeout=10).status_code


def test_a_logged_in_browser_costs_one_hash(dashboard: tuple[str, Path], counted: Counted) -> None:
    url, _ = dashboard
    ada = ("ada", "correct horse")
    page = httpx.get(url + "/", auth=ada, timeout=10)
    scripts = re.findall(r'<script src="(/[^"]+)"', page.text)
    assert len(scripts) > 3 and counted.hashes == 1
    for _ in range(10):
        for path in (*BROWSER_REQUESTS, *scripts[:3]):
            assert status(url + path, ada) == 200, path
    assert counted.hashes == 1
    with ThreadPoolExecutor(8) as pool:  # a page's callbacks arrive together
        assert set(pool.map(lambda _: status(url + "/_dash-layout", ada), range(40))) == {200}
    assert counted.hashes == 1
    assert status(url + "/", ("bob", "battery staple")) == 200 and counted.hashes == 2, "one per user"


def test_a_wrong_password_costs_the_full_hash_every_time(dashboard: tuple[str, Path], counted: Counted) -> None:
    url, _ = dashboard
    assert status(url + "/", ("ada", "correct horse")) == 200
    for attempt, credentials in enumerate(
        [("ada", "correct hors"), ("ada", "correct horse "), ("ada", ""), ("nobody", "correct horse")], start=2
    ):
        assert status(url + "/", credentials) == 401, credentials
        assert counted.hashes == attempt, credentials
    assert status(url + "/", ("ada", "correct horse")) == 200 and counted.hashes == 5, "still cached"
    assert status(url + "/", None) == 401 and counted.hashes == 5, "no credentials: nothing to hash"


def test_a_changed_password_file_counts_at_the_next_request(dashboard: tuple[str, Path], counted: Counted) -> None:
    url, users = dashboard
    assert status(url + "/", ("ada", "correct horse")) == 200
    write_users(users, ada="new password")  # ada's password changed, bob removed
    assert status(url + "/", ("ada", "correct horse")) == 401, "the cached login is gone with its line"
    assert status(url + "/", ("bob", "battery staple")) == 401
    assert status(url + "/", ("ada", "new password")) == 200
    users.write_text("ada:not a hash\n")  # half-written: the last good users stay
    assert status(url + "/", ("ada", "new password")) == 200
    assert counted.hashes == 4


def test_failed_logins_are_limited_per_address(dashboard: tuple[str, Path], counted: Counted) -> None:
    url, _ = dashboard
    ada = ("ada", "correct horse")
    assert status(url + "/", ada) == 200  # cached before the attack
    for _ in range(BURST):
        assert status(url + "/", ("ada", "guess")) == 401
    hashes = counted.hashes
    refused = httpx.get(url + "/", auth=("ada", "guess"), timeout=10)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0, refused.text
    assert "Too many failed logins" in refused.text
    assert status(url + "/", ("bob", "battery staple")) == 429, "right or wrong: no oracle"
    assert counted.hashes == hashes, "refused without a hash"
    assert status(url + "/", ada) == 200, "a cached login is not locked out"
    # Another address has its own budget (all of 127/8 is loopback).
    with httpx.Client(transport=httpx.HTTPTransport(local_address="127.0.0.2")) as elsewhere:
        assert status(url + "/", ("bob", "battery staple"), elsewhere) == 200


def test_the_cache_is_bounded_short_lived_and_tied_to_the_stored_hash() -> None:
    now = [0.0]
    logins = VerifiedLogins(ttl_s=300, max_entries=3, clock=lambda: now[0])
    for n in range(10):
        logins.add(f"user{n}", "pw", "stored")
    assert len(logins) == 3
    assert not logins.hit("user0", "pw", "stored"), "the oldest went first"
    assert logins.hit("user9", "pw", "stored")
    assert not logins.hit("user9", "wrong", "stored")
    assert not logins.hit("user9", "pw", "another stored hash"), "a changed password file"
    assert not any(b"pw" in digest for digest, _ in logins._entries.values()), "no password in clear"
    now[0] = 299.0
    assert logins.hit("user9", "pw", "stored")
    now[0] = 300.0
    assert not logins.hit("user9", "pw", "stored"), "expired"
    assert len(logins) == 2


def test_the_throttle_refills_and_forgets_old_addresses() -> None:
    now = [0.0]
    throttle = FailureThrottle(burst=2, refill_s=10, max_addresses=2, clock=lambda: now[0])
    take: Callable[[str], float] = throttle.take
    assert take("a") == 0 and take("a") == 0
    assert take("a") == pytest.approx(10)
    now[0] = 5.0
    assert take("a") == pytest.approx(5)
    throttle.give_back("a")  # a success costs nothing
    assert take("a") == 0
    now[0] = 15.0
    assert take("a") == 0 and take("a") > 0
    assert take("b") == 0 and take("c") == 0
    assert len(throttle._buckets) == 2, "bounded"
