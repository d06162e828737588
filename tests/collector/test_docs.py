"""The collector's /docs works with no way out to the internet: Swagger UI's files come from the
collector itself, they are a Swagger UI that renders OpenAPI 3.1 (what FastAPI writes), and a read token,
where one is set, guards them as it guards /docs."""

from __future__ import annotations

import re

import httpx

from tests.processes import RunningCollector


def test_docs_load_nothing_from_elsewhere(collector: RunningCollector) -> None:
    page = httpx.get(collector.url + "/docs", timeout=10)
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources, page.text
    assert all(s.startswith("/") for s in sources), f"every asset from the collector: {sources}"
    for source in sources:
        asset = httpx.get(collector.url + source, timeout=10)
        assert asset.status_code == 200 and asset.content, source
    bundle = httpx.get(collector.url + "/docs-assets/swagger-ui-bundle.js", timeout=10).text
    version = re.search(r'PACKAGE_VERSION:"(\d+)\.', bundle)
    assert version and int(version.group(1)) >= 5, "Swagger UI 5 or later: 4.x cannot render OpenAPI 3.1"
    assert httpx.get(collector.url + "/openapi.json", timeout=10).json()["openapi"].startswith("3.1")
    assert httpx.get(collector.url + "/redoc", timeout=10).status_code == 404, "no page left that needs a CDN"
