"""Serves POST /api/v1/samples ahead of FastAPI's routing, middleware and dependency resolution.

The ingest route is the one hot path: profiling under load put FastAPI's per-request machinery at
about a quarter of the collector's CPU. The handler is the same function FastAPI documents and would
call; only the way to reach it is shorter. Everything else (lifespan, read API, /docs) goes to FastAPI.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from gpuscope.collector.api.ingest import push_samples
from gpuscope.collector.api.state import collector_state
from gpuscope.collector.ingest.body_rules import is_ingest


class FastIngest:
    def __init__(self, app: FastAPI) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if is_ingest(scope):
            scope["app"] = self.app
            request = Request(scope, receive)
            response = await push_samples(request, collector_state(self.app).ingest)
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
