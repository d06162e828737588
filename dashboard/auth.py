"""Optional HTTP basic auth for the whole dashboard, from a file of `user:pbkdf2_sha256$iterations$salt$hash`
lines (`gpuscope dashboard --hash-password` makes one). Passwords are never stored in clear; checks
run in constant time. Use it behind TLS (a reverse proxy): basic auth sends the password each request.
A changed file takes effect at the next request. A browser's password is hashed once per few minutes
(login_cache.py); failed logins are limited per address (login_throttle.py)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import math
import secrets
import threading
from pathlib import Path

from flask import Flask, Request, Response, request

from gpuscope.dashboard.login_cache import VerifiedLogins
from gpuscope.dashboard.login_throttle import FailureThrottle

ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256

log = logging.getLogger(__name__)
FileStamp = tuple[int, int, int]  # inode, size, mtime in ns: a change to any means the file changed


class BasicAuthError(ValueError):
    pass


class UsersFile(dict[str, str]):
    """The users read from `path`, and the file's stamp before it was read (protect() re-reads the file
    when the stamp changes). A plain dict of users works too; it is never re-read."""

    def __init__(self, users: dict[str, str], path: Path, stamp: FileStamp) -> None:
        super().__init__(users)
        self.path = path
        self.stamp = stamp


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${_b64(salt)}${_b64(digest)}"


def read_users(path: Path) -> UsersFile:
    try:
        stamp = _stamp(path)  # before reading: a write after this changes it, and is read next time
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise BasicAuthError(f"cannot read basic auth file {path}: {exc.strerror}") from None
    users = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, stored = line.partition(":")
        if not sep or not user or not stored.startswith("pbkdf2_sha256$") or stored.count("$") != 3:
            raise BasicAuthError(
                f"{path}:{number}: expected 'user:pbkdf2_sha256$...' (gpuscope dashboard --hash-password)"
            )
        users[user] = stored
    if not users:
        raise BasicAuthError(f"{path} lists no users")
    return UsersFile(users, path, stamp)


def verify(users: dict[str, str], user: str, password: str) -> bool:
    stored = users.get(user)
    # An unknown user costs the same hash as a known one: timing says nothing about who exists.
    _, iterations, salt, digest = (stored or next(iter(users.values()))).split("$")
    computed = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    return hmac.compare_digest(computed, base64.b64decode(digest)) and stored is not None


def protect(
    server: Flask,
    users: dict[str, str],
    logins: VerifiedLogins | None = None,
    throttle: FailureThrottle | None = None,
) -> None:
    """Every request, the Dash assets and callbacks included, needs a valid user and password."""
    gate = _Gate(users, logins or VerifiedLogins(), throttle or FailureThrottle())

    @server.before_request
    def check() -> Response | None:
        return gate.check(request)


class _Gate:
    def __init__(self, users: dict[str, str], logins: VerifiedLogins, throttle: FailureThrottle) -> None:
        self._users = users
        self._logins = logins
        self._throttle = throttle
        self._reading = threading.Lock()

    def check(self, req: Request) -> Response | None:
        auth = req.authorization
        if not (auth and auth.type == "basic" and auth.username is not None and auth.password is not None):
            return _challenge()
        users = self._current()
        user, password = auth.username, auth.password
        # A cached login skips the hash and the throttle: a guesser sharing the address locks nobody out.
        if self._logins.hit(user, password, users.get(user, "")):
            return None
        address = req.remote_addr or ""
        wait_s = self._throttle.take(address)
        if wait_s > 0:
            text = f"Too many failed logins from this address: try again in {math.ceil(wait_s)} s.\n"
            return Response(text, 429, {"Retry-After": str(math.ceil(wait_s)), "Content-Type": "text/plain"})
        if verify(users, user, password):
            self._logins.add(user, password, users[user])
            self._throttle.give_back(address)
            return None
        return _challenge()

    def _current(self) -> dict[str, str]:
        """The users now: a UsersFile is read again when its file has changed, so a new password (or a
        removed user) counts from the next request; a cached login made with the old line misses."""
        users = self._users
        if not isinstance(users, UsersFile):
            return users
        try:
            stamp = _stamp(users.path)
        except OSError:
            return users  # moved away or unreadable for a moment (an editor saving it): keep what we have
        if stamp == users.stamp:
            return users
        with self._reading:
            if self._users is users:  # not already re-read by another request
                try:
                    self._users = read_users(users.path)
                except BasicAuthError as exc:
                    # Half-written, most likely: keep the last good users until the file changes again.
                    log.warning("dashboard: keeping the previous users: %s", exc)
                    self._users = UsersFile(users, users.path, stamp)
            return self._users


def _challenge() -> Response:
    return Response("login required", 401, {"WWW-Authenticate": 'Basic realm="gpuscope", charset="UTF-8"'})


def _stamp(path: Path) -> FileStamp:
    status = path.stat()
    return status.st_ino, status.st_size, status.st_mtime_ns


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
