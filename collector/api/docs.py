"""/docs: the API's Swagger UI, served from the collector itself, so it works where the collector has no
way out to the internet (FastAPI's own /docs loads Swagger UI from a CDN and is blank offline).

The assets come from the `fastapi-swagger` package, which ships Swagger UI 5 (the first to render
OpenAPI 3.1, what FastAPI writes). They sit behind the same token check as every other read.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs-assets"


def install(app: FastAPI) -> None:
    """Serve /docs and its assets; the app must be made with docs_url=None and redoc_url=None."""
    folder = resources.files("fastapi_swagger").joinpath("resources")
    app.mount(ASSETS, StaticFiles(directory=str(folder)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )
