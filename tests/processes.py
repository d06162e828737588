"""One way to start each process in the tests: through the same build() the CLI and the demo use."""

from __future__ import annotations

import contextlib
import secrets
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuscope.collector.service import BackgroundServer
from gpuscope.collector_process import CollectorSettings, build


@dataclass(frozen=True)
class RunningCollector:
    url: str
    token: str
    dsn: str
    port: int = 0


@contextlib.contextmanager
def running_collector(
    dsn: str,
    *,
    token: str | None = None,
    port: int = 0,
    read_token: str | None = None,
    admin_token: str | None = None,
    node_tokens: dict[str, str] | None = None,
    rules: str | None = None,
    notify: dict[str, Any] | None = None,
    **settings: Any,
) -> Iterator[RunningCollector]:
    """A real collector (uvicorn on 127.0.0.1) over `dsn`, configured as a user would: tokens, rules and
    notification config go through files. No `rules`: no alert engine (the alerting API is still served);
    no health loop unless `health=True` (its API is served either way)."""
    token = token or secrets.token_urlsafe(24)
    with tempfile.TemporaryDirectory(prefix="gpuscope-test-collector-") as tmp:
        folder = Path(tmp)
        settings.setdefault("alerts", rules is not None)
        settings.setdefault("health", False)  # the health loop judges only where a test asks (health=True)
        if read_token:
            settings["read_token_file"] = _write(folder / "read-token", read_token)
        if admin_token:
            settings["admin_token_file"] = _write(folder / "admin-token", admin_token)
        if node_tokens:
            lines = "".join(f"{node} {node_token}\n" for node, node_token in node_tokens.items())
            settings["node_tokens_file"] = _write(folder / "node-tokens", lines)
        if rules is not None:
            settings["alert_rules"] = [_write(folder / "rules.yaml", rules)]
        if notify is not None:
            settings["notify_config"] = _write(folder / "notify.yaml", yaml.safe_dump(notify))
        app = build(CollectorSettings(listen=f"127.0.0.1:{port}", data_dir=folder, **settings), dsn, token)
        server = BackgroundServer(app, "127.0.0.1", port)
        server.start()
        try:
            yield RunningCollector(url=f"http://127.0.0.1:{server.port}", token=token, dsn=dsn, port=server.port)
        finally:
            server.stop()


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path
