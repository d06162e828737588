"""Bearer-token checks for the ingest (and optionally read) API, in constant time."""

from __future__ import annotations

import hmac
import logging
import secrets
from pathlib import Path
from typing import Final, Literal

from gpuscope.core.tokens import TokenError, read_token_file

log = logging.getLogger(__name__)


# What a token may send for: ANY_NODE (a shared token), or one (cluster, node) (a node's token).
ANY_NODE: Final = "*"
NodeScope = Literal["*"] | tuple[str, str]


class TokenAuth:
    """Bearer tokens: shared ones (any node may use them) and per-node ones (valid for one node of one
    cluster only)."""

    def __init__(self, tokens: list[str], node_tokens: dict[tuple[str, str], str] | None = None) -> None:
        entries: list[tuple[str, NodeScope]] = [(t, ANY_NODE) for t in tokens]
        entries += [(t, scope) for scope, t in (node_tokens or {}).items()]
        if not entries or any(len(t) < 16 for t, _ in entries):
            raise TokenError("tokens must be at least 16 characters long")
        if len({t for t, _ in entries}) != len(entries):
            raise TokenError("the same token is given twice (a node's token must be its own)")
        self._entries = [(t.encode(), scope) for t, scope in entries]

    def identify(self, authorization: str | None) -> NodeScope | None:
        """What the offered token may send for (ANY_NODE for a shared token, (cluster, node) for a node's
        token), or None if it is no token of ours."""
        scheme, _, credential = (authorization or "").partition(" ")
        offered = credential.strip().encode() if scheme.lower() == "bearer" else b""
        # Compare against every token, always, so timing says nothing about which (if any) matched.
        found: NodeScope | None = None
        for token, scope in self._entries:
            if hmac.compare_digest(offered, token):
                found = scope
        return found

    def verify(self, authorization: str | None) -> bool:
        return self.identify(authorization) is not None


NODE_TOKENS_FORMAT = "'CLUSTER/NODE TOKEN'"


def read_node_tokens(path: Path) -> dict[tuple[str, str], str]:
    """A per-node tokens file: one 'CLUSTER/NODE TOKEN' per line (the node is what follows the last
    '/'; a cluster may contain '/'), blank lines and # comments ignored. Each token is valid for
    batches of that node of that cluster only. The older 'NODE TOKEN' lines named no cluster and let a
    node's token send for a node of that name in any cluster: they are refused, naming the line."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TokenError(f"cannot read node tokens file {path}: {exc.strerror}") from None
    tokens: dict[tuple[str, str], str] = {}
    for number, line in enumerate(lines, 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2:
            raise TokenError(f"{path}:{number}: expected {NODE_TOKENS_FORMAT}")
        name, token = fields
        cluster, slash, node = name.rpartition("/")
        if not (slash and cluster and node):
            raise TokenError(
                f"{path}:{number}: expected {NODE_TOKENS_FORMAT}: a node's token is bound to its cluster too"
                f" (write e.g. 'prod-a/{node or name} …'; plain 'NODE TOKEN' lines are no longer accepted)"
            )
        if (cluster, node) in tokens:
            raise TokenError(f"{path}:{number}: node {name!r} listed twice")
        if token in tokens.values():
            raise TokenError(f"{path}:{number}: the same token as another node: each node needs its own")
        tokens[(cluster, node)] = token
    if not tokens:
        raise TokenError(f"{path} lists no node tokens")
    if path.stat().st_mode & 0o077:
        log.warning("node tokens file %s is readable by other users; chmod 600 it", path)
    return tokens


def token_or_generate(token_file: Path | None, data_dir: Path, name: str = "ingest-token") -> str:
    """The configured token, or one generated once and kept in the data directory (mode 600)."""
    if token_file is not None:
        return read_token_file(token_file)
    generated = data_dir / name
    if generated.exists():
        return read_token_file(generated)
    data_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    generated.touch(mode=0o600)
    generated.write_text(token + "\n", encoding="utf-8")
    hint = " (give it to exporters with --token-file)" if name == "ingest-token" else ""
    log.info("generated a token in %s%s", generated, hint)
    return token


def redact(secret: str) -> str:
    """Enough of a secret to tell two apart in a log, never enough to use it."""
    return secret[:4] + "…" if len(secret) > 8 else "…"
