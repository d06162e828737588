"""No secret reaches the logs at the level the CLI configures (issue 16, finding 2).

Webhook URLs carry their secret in the path or the query, the collector's tokens travel as bearer
headers, DSNs carry a password. Our own log lines redact them (alerts/redact.py), but libraries log
requests on their own: httpx printed every delivery's full URL at INFO. Here a whole delivery run (the
alert engine firing an alert and delivering it to a real HTTP receiver on 127.0.0.1 for every kind of
receiver) runs under the CLI's own logging setup, and every line it logs is searched for the secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from collections.abc import Iterator

import httpx
import psycopg
import pytest

from gpuscope.alerts import views
from gpuscope.alerts.config import parse_notify_config
from gpuscope.alerts.engine import AlertEngine
from gpuscope.alerts.notify import KINDS
from gpuscope.alerts.notify.post import post
from gpuscope.alerts.part import alerts_part
from gpuscope.alerts.rules import parse_rules
from gpuscope.cli import setup_logging
from gpuscope.core.logredact import register_secret
from tests.alerts.receiver import ChatReceiver
from tests.alerts.rules import HOT
from tests.alerts.telemetry import add_node, gpu_sample
from tests.waiting import eventually_async


@contextlib.contextmanager
def cli_logging(verbose: bool = False) -> Iterator[io.StringIO]:
    """Everything logged while the context lasts, as the CLI's logging setup writes it; the logging
    configuration is put back afterwards."""
    root = logging.getLogger()
    known = dict(logging.root.manager.loggerDict)
    levels = {name: lg.level for name, lg in known.items() if isinstance(lg, logging.Logger)}
    logger_filters = {name: list(lg.filters) for name, lg in known.items() if isinstance(lg, logging.Logger)}
    root_level, root_handlers = root.level, list(root.handlers)
    filters = {h: list(h.filters) for h in root_handlers}
    out = io.StringIO()
    handler = setup_logging(verbose, stream=out)
    try:
        yield out
    finally:
        if handler is not None:
            root.removeHandler(handler)
        root.setLevel(root_level)
        for h, saved in filters.items():
            h.filters[:] = saved
        for name, lg in logging.root.manager.loggerDict.items():
            if isinstance(lg, logging.Logger):
                lg.setLevel(levels.get(name, logging.NOTSET))
                lg.filters[:] = logger_filters.get(name, [])


def _url(base: str, kind: str) -> str:
    return f"{base}/services/T000/B000/SECRETXYZ{kind.upper()}?token=QTOKEN{kind.upper()}"


def _secrets(kind: str) -> list[str]:
    return [f"SECRETXYZ{kind.upper()}", f"QTOKEN{kind.upper()}"]


def test_a_delivery_run_logs_no_webhook_secret_and_no_password(dsn: str) -> None:
    views.apply(dsn)
    for kind in KINDS:
        (gpu,) = add_node(dsn, f"n-{kind}", gpus=1)
        gpu_sample(dsn, gpu, temp_c=95)
    password = psycopg.conninfo.conninfo_to_dict(dsn)["password"]
    assert isinstance(password, str) and password
    with ChatReceiver() as receiver:
        cfg = parse_notify_config(
            {
                "route": {"receiver": "slack", "group_by": ["node"], "group_wait": "0s",
                          "routes": [{"matchers": [f"node=n-{kind}"], "receiver": kind} for kind in KINDS]},
                "receivers": [{"name": kind, "kind": kind, "url": _url(receiver.url, kind), "min_interval": "0s"}
                              for kind in KINDS],
            }
        )  # fmt: skip

        def all_sent() -> bool:
            with psycopg.connect(dsn) as conn:
                row = conn.execute("SELECT count(*) FROM alert_notification WHERE status = 'sent'").fetchone()
                return row == (len(KINDS),)

        async def run_engine() -> None:
            task = asyncio.create_task(
                alerts_part(AlertEngine(parse_rules(HOT), cfg, tick_s=0.1)).leader_tasks[0].run(dsn)
            )
            try:
                await eventually_async(
                    lambda: asyncio.to_thread(all_sent), timeout=30, interval=0.05, what="every receiver's message"
                )
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        with cli_logging() as out:
            asyncio.run(run_engine())
        paths = {r.path for r in receiver.received}
    logged = out.getvalue()

    assert len(paths) == len(KINDS), f"each receiver was sent its message: {sorted(paths)}"
    assert all(any(s in p for p in paths) for kind in KINDS for s in _secrets(kind)), "the secrets were in the URLs"
    assert "notification" in logged and "sent to slack" in logged, f"the run's own lines were captured:\n{logged}"
    for kind in KINDS:
        for secret in _secrets(kind):
            assert secret not in logged, f"{kind}'s webhook secret {secret} is in the log:\n{logged}"
    assert password not in logged, "the database password is in the log"


@pytest.mark.parametrize("verbose", [False, True])
def test_library_loggers_that_print_requests_are_quiet_at_the_default_level(verbose: bool) -> None:
    with cli_logging(verbose):
        for name in ("httpx", "httpcore", "urllib3", "uvicorn.access", "psycopg", "psycopg.pool", "werkzeug"):
            assert not logging.getLogger(name).isEnabledFor(logging.INFO), f"{name} logs at INFO"
        assert logging.getLogger("gpuscope.alerts.delivery").isEnabledFor(logging.INFO), "our own lines still show"


def test_what_a_library_logs_anyway_is_redacted() -> None:
    """Defence in depth: a warning or an error from any library goes through the same redaction."""
    lib = logging.getLogger("somelib.client")
    register_secret("http://127.0.0.1:9/discord")  # a receiver's path: it must not eat discord.com below
    with cli_logging() as out:
        lib.warning("POST %s failed", "https://hooks.slack.com/services/T000/B000/SECRETXYZSLACK")
        lib.warning("retrying https://discord.com/api/webhooks/123/SECRETXYZDISCORD?wait=true")
        lib.warning("sending to https://chat.googleapis.com/v1/spaces/AAA/messages?key=KEYSECRET&token=QTOKENCHAT")
        lib.error("headers: {'Authorization': 'Bearer BEARERSECRET', 'accept': '*/*'}")
        lib.error("connect to postgresql://gpuscope:PGSECRET@db.example:5432/gpuscope?sslmode=require failed")
        lib.error("connect to 'host=db.example user=gpuscope password=KVSECRET dbname=gpuscope' failed")
        lib.warning("serving http://127.0.0.1:9400/metrics")  # a URL with nothing secret keeps its path
        try:
            raise RuntimeError("POST https://example.org/hooks/TRACEBACKSECRET returned 500")
        except RuntimeError:
            lib.exception("delivery failed")
    logged = out.getvalue()
    for secret in ("SECRETXYZSLACK", "SECRETXYZDISCORD", "KEYSECRET", "QTOKENCHAT", "BEARERSECRET", "PGSECRET",
                   "KVSECRET", "TRACEBACKSECRET"):  # fmt: skip
        assert secret not in logged, f"{secret} is in the log:\n{logged}"
    # what is not secret still helps: which host, which user and database, what went wrong
    for kept in ("hooks.slack.com", "discord.com", "chat.googleapis.com", "db.example:5432/gpuscope", "user=gpuscope",
                 "http://127.0.0.1:9400/metrics",
                 "RuntimeError", "delivery failed"):  # fmt: skip
        assert kept in logged, f"{kept} is missing from the log:\n{logged}"


def test_uvicorn_access_lines_lose_their_query_tokens() -> None:
    """uvicorn's access log writes through its own handler and formatter (which reads the record's
    arguments): a token in a query string is redacted there too, and the line still formats."""
    from uvicorn.logging import AccessFormatter

    access = logging.getLogger("uvicorn.access")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False))
    saved = access.handlers[:], access.propagate, access.level
    with cli_logging():
        access.handlers[:], access.propagate = [handler], False
        access.setLevel(logging.INFO)  # as uvicorn.Config(log_level="info") sets it
        try:
            access.info(
                '%s - "%s %s HTTP/%s" %d',
                "10.0.0.7:5123",
                "GET",
                "/api/v1/alerts?state=firing&token=QSECRET1",
                "1.1",
                200,
            )
        finally:
            access.handlers[:], access.propagate = saved[0], saved[1]
            access.setLevel(saved[2])
    logged = out.getvalue()
    assert "QSECRET1" not in logged
    assert '10.0.0.7:5123 - "GET /api/v1/alerts?state=firing&token=*** HTTP/1.1" 200' in logged, logged


def test_a_receiver_url_that_looks_plain_is_still_kept_out() -> None:
    """A generic webhook's secret may look like any path: once delivery has used the URL, no log line
    shows its path or query, whoever logs it."""
    with ChatReceiver() as receiver:
        url = f"{receiver.url}/ci/notify-deploys?room=ops"

        async def send() -> None:
            async with httpx.AsyncClient() as client:
                await post(client, "webhook", url, {"text": "hello"})

        asyncio.run(send())
        assert len(receiver.at("/ci/notify-deploys?room=ops")) == 1
        with cli_logging() as out:
            logging.getLogger("somelib").warning("cannot reach %s", url)
            logging.getLogger("somelib").warning("path /ci/notify-deploys refused")
    logged = out.getvalue()
    assert "notify-deploys" not in logged and "room=ops" not in logged, logged
    assert "cannot reach http://127.0.0.1:" in logged, logged
