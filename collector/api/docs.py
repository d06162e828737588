"""/docs: the API's Swagger UI, served from the collector itself, so it works where the collector has no
way out to the internet (FastAPI's own /docs loads Swagger UI from a CDN and is blank offline).

The assets come from the `fastapi-swagger` package, which ships Swagger UI 5 (the first to render
OpenAPI 3.1, what FastAPI writes).

A browser cannot send a bearer token by itself, so with a read token set (--read-token-file) /docs
would be a 401 to everyone. The page and Swagger UI's files hold nothing of this collector and are
served without a token (api/guard.py); the description of the API (/openapi.json) stays behind it. The
page fetches that with the token it has, and where the collector wants one, asks for it: the token is
kept in the tab (sessionStorage) and goes, as a bearer header, with the description's fetch and with
every request "Try it out" sends.
"""

from __future__ import annotations

import html
import json
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

ASSETS = "/docs-assets"
TOKEN_KEY = "gpuscope-read-token"  # noqa: S105 (sessionStorage's key for it, not a token)


def install(app: FastAPI) -> None:
    """Serve /docs and its assets; the app must be made with docs_url=None and redoc_url=None."""
    folder = resources.files("fastapi_swagger").joinpath("resources")
    app.mount(ASSETS, StaticFiles(directory=str(folder)), name="docs-assets")
    page = docs_page(title=f"{app.title} API", openapi_url=app.openapi_url or "/openapi.json")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return HTMLResponse(page)


def docs_page(title: str, openapi_url: str) -> str:
    return _PAGE.format(
        title=html.escape(title),
        assets=ASSETS,
        openapi_url=json.dumps(openapi_url),
        token_key=json.dumps(TOKEN_KEY),
    )


_PAGE = """<!DOCTYPE html>
<html>
<head>
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<link type="text/css" rel="stylesheet" href="{assets}/swagger-ui.css">
<link rel="shortcut icon" href="{assets}/favicon-32x32.png">
<title>{title}</title>
<style>
  #token-form {{ font-family: sans-serif; max-width: 40em; margin: 3em auto; }}
  #token-form input {{ width: 28em; padding: 0.3em; }}
  #token-problem {{ color: #b00020; }}
</style>
</head>
<body>
<form id="token-form" hidden>
  <h2>{title}</h2>
  <p>This collector shows its API only with its read token (the one in the file given to
  <code>gpuscope collector --read-token-file</code>). Paste it here: it is kept in this browser tab only,
  and sent with the API's description and with the requests you try.</p>
  <p id="token-problem"></p>
  <input id="token" type="password" autocomplete="off" placeholder="read token">
  <button type="submit">Show the API</button>
</form>
<div id="swagger-ui"></div>
<script src="{assets}/swagger-ui-bundle.js"></script>
<script>
  const openapiUrl = {openapi_url};
  const tokenKey = {token_key};
  const form = document.getElementById("token-form");

  function withToken(headers) {{
    const token = sessionStorage.getItem(tokenKey);
    if (token) headers["Authorization"] = "Bearer " + token;
    return headers;
  }}

  function askForToken(problem) {{
    document.getElementById("token-problem").textContent = problem;
    form.hidden = false;
    document.getElementById("token").focus();
  }}

  async function show() {{
    const answer = await fetch(openapiUrl, {{ headers: withToken({{}}) }});
    if (answer.status === 401 || answer.status === 403) {{
      const given = sessionStorage.getItem(tokenKey) !== null;
      sessionStorage.removeItem(tokenKey);
      askForToken(given ? "The collector did not accept that token (HTTP " + answer.status + ")." : "");
      return;
    }}
    if (!answer.ok) {{
      askForToken("The collector answered HTTP " + answer.status + " for " + openapiUrl + ".");
      return;
    }}
    form.hidden = true;
    SwaggerUIBundle({{
      spec: await answer.json(),
      dom_id: "#swagger-ui",
      layout: "BaseLayout",
      deepLinking: true,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
      requestInterceptor: (request) => {{ withToken(request.headers); return request; }},
    }});
  }}

  form.addEventListener("submit", (event) => {{
    event.preventDefault();
    sessionStorage.setItem(tokenKey, document.getElementById("token").value.trim());
    show();
  }});
  show();
</script>
</body>
</html>
"""
