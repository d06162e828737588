"""Optional HTTP basic auth for the whole dashboard, from a file of `user:pbkdf2_sha256$iterations$salt$hash`
lines (`gpuscope dashboard --hash-password` makes one). Passwords are never stored in clear; checks
run in constant time. Use it behind TLS (a reverse proxy): basic auth sends the password each request."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from pathlib import Path

from flask import Flask, Request, Response, request

ITERATIONS = 600_000  # OWASP's 2023 figure for PBKDF2-HMAC-SHA256


class BasicAuthError(ValueError):
    pass


def hash_password(password: str, iterations: int = ITERATIONS) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    return f"pbkdf2_sha256${iterations}${_b64(salt)}${_b64(digest)}"


def read_users(path: Path) -> dict[str, str]:
    try:
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
    return users


def verify(users: dict[str, str], user: str, password: str) -> bool:
    stored = users.get(user)
    # An unknown user costs the same hash as a known one: timing says nothing about who exists.
    _, iterations, salt, digest = (stored or next(iter(users.values()))).split("$")
    computed = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(salt), int(iterations))
    return hmac.compare_digest(computed, base64.b64decode(digest)) and stored is not None


def protect(server: Flask, users: dict[str, str]) -> None:
    """Every request, the Dash assets and callbacks included, needs a valid user and password."""

    @server.before_request
    def check() -> Response | None:
        if _authorised(request, users):
            return None
        return Response("login required", 401, {"WWW-Authenticate": 'Basic realm="gpuscope", charset="UTF-8"'})


def _authorised(req: Request, users: dict[str, str]) -> bool:
    auth = req.authorization
    return bool(
        auth
        and auth.type == "basic"
        and auth.username is not None
        and auth.password is not None
        and verify(users, auth.username, auth.password)
    )


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()
