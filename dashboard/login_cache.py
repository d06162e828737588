"""Logins that passed the password hash recently. Basic auth sends the password with every request
(the page, its assets, each callback, every refresh), and each check is a PBKDF2 hash of ~0.1 s of
CPU: without this, a logged-in browser costs a hash per request.

One entry per user: an HMAC, under a key made at start and never stored, of the password presented
together with the user's line in the password file, so no password is kept in clear and a changed
line (a new password) makes the entry miss. Only successes are kept: a wrong password never matches
and still costs the full hash. Entries live `ttl_s` from their hash; at most `max_entries` of them."""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

TTL_S = 300.0
MAX_ENTRIES = 1024
_NO_DIGEST = bytes(32)  # what a user without an entry is compared against: every miss costs the same


class VerifiedLogins:
    def __init__(
        self, ttl_s: float = TTL_S, max_entries: int = MAX_ENTRIES, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._clock = clock
        self._key = secrets.token_bytes(32)
        self._entries: OrderedDict[str, tuple[bytes, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def hit(self, user: str, password: str, stored: str) -> bool:
        """Whether `user` logged in with this password, against this stored hash, within the TTL."""
        digest = self._digest(user, password, stored)
        now = self._clock()
        with self._lock:
            known, expires = self._entries.get(user, (_NO_DIGEST, 0.0))
            if expires <= now:
                self._entries.pop(user, None)
        return hmac.compare_digest(digest, known) and now < expires

    def add(self, user: str, password: str, stored: str) -> None:
        """Remember a login that the hash has just accepted."""
        digest = self._digest(user, password, stored)
        with self._lock:
            self._entries[user] = (digest, self._clock() + self._ttl_s)
            self._entries.move_to_end(user)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)  # the oldest login hashes again next time

    def _digest(self, user: str, password: str, stored: str) -> bytes:
        # JSON keeps the three apart whatever they contain (a password may hold any character).
        return hmac.digest(self._key, json.dumps([user, password, stored]).encode(), "sha256")
