from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require_tool


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Headless Chromium for this module's tests (required in CI, skipped locally without it)."""
    from gpuscope.bench.browser import chromium

    require_tool("chromium")
    require_tool("chromedriver")
    with chromium() as driver:
        yield driver
