"""A TimescaleDB server for tests: the pinned PGlite build (tests/timescale/package.json) behind
server.mjs. Skipped locally without Node or `npm ci`; a failure in CI, where .ci/run installs both."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require_tool

HERE = Path(__file__).parent
PACKAGE = HERE / "node_modules" / "@unni-craftsman" / "pglite" / "package.json"


@pytest.fixture
def timescale_dsn() -> Iterator[str]:
    node = require_tool("node")
    if not PACKAGE.exists():
        message = f"{PACKAGE.parent} missing: run `npm ci --prefix {HERE}` (make test does when npm is installed)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    server = subprocess.Popen(
        [node, str(HERE / "server.mjs")], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()  # blocks until listening (a few seconds: WebAssembly start-up)
        if not line.startswith("PORT "):
            pytest.fail(f"PGlite server did not start: {line!r} {server.stderr.read() if server.stderr else ''}")
        port = int(line.split()[1])
        # PGlite accepts any password; libpq wants one offered.
        yield f"host=127.0.0.1 port={port} user=postgres password=pglite dbname=postgres sslmode=disable"
    finally:
        server.terminate()
        server.wait(10)
