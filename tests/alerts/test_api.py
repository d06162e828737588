"""The alerting API on a real collector: silences created and expired with the admin token only,
clear errors for bad input, and the read side (alerts, rule health, notifications)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from tests.processes import running_collector

ADMIN = "admin-" + secrets.token_urlsafe(16)


@pytest.fixture
def api(dsn: str) -> Iterator[str]:
    with running_collector(dsn, admin_token=ADMIN) as collector:
        yield collector.url


def test_silences_are_created_listed_and_expired_with_the_admin_token(api: str) -> None:
    body = {"matchers": ["node=gpu-07", {"name": "severity", "op": "=~", "value": "warn.*"}], "duration_s": 3600,
            "comment": "fan swap", "created_by": "ops"}  # fmt: skip
    assert httpx.post(f"{api}/api/v1/silences", json=body).status_code == 401
    wrong = httpx.post(f"{api}/api/v1/silences", json=body, headers={"Authorization": "Bearer " + "y" * 20})
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == "Bearer"
    created = httpx.post(f"{api}/api/v1/silences", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
    assert created.status_code == 201
    silence = created.json()
    assert silence["state"] == "active" and silence["comment"] == "fan swap"
    assert silence["matchers"] == [{"name": "node", "op": "=", "value": "gpu-07"},
                                   {"name": "severity", "op": "=~", "value": "warn.*"}]  # fmt: skip
    assert [s["id"] for s in httpx.get(f"{api}/api/v1/silences").json()] == [silence["id"]]

    assert httpx.delete(f"{api}/api/v1/silences/{silence['id']}").status_code == 401
    expired = httpx.delete(f"{api}/api/v1/silences/{silence['id']}", headers={"Authorization": f"Bearer {ADMIN}"})
    assert expired.status_code == 200 and expired.json()["state"] == "expired"
    assert httpx.get(f"{api}/api/v1/silences").json() == []
    assert [s["state"] for s in httpx.get(f"{api}/api/v1/silences", params={"all": "true"}).json()] == ["expired"]
    missing = httpx.delete(f"{api}/api/v1/silences/999", headers={"Authorization": f"Bearer {ADMIN}"})
    assert missing.status_code == 404


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"matchers": ["node=~("], "duration_s": 60}, "bad regular expression"),
        ({"matchers": ["node"], "duration_s": 60}, "is not name=value"),
        ({"matchers": [], "duration_s": 60}, "at least 1 item"),
        ({"matchers": ["node=a"]}, "exactly one of duration_s and ends_at"),
        ({"matchers": ["node=a"], "duration_s": -5}, "greater than 0"),
        ({"matchers": ["node=a"], "ends_at": "2020-01-01T00:00:00Z"}, "in the past"),
        ({"matchers": ["node=a"], "ends_at": "9999-12-31T23:59:59Z"}, "at most 366 days"),
        ({"matchers": ["node=a"], "ends_at": "2030-01-01T00:00:00"}, "needs a time zone"),
    ],
)
def test_bad_silences_are_refused_with_the_reason(api: str, body: dict[str, object], reason: str) -> None:
    response = httpx.post(f"{api}/api/v1/silences", json=body, headers={"Authorization": f"Bearer {ADMIN}"})
    assert response.status_code == 422
    assert reason in response.text


def test_without_an_admin_token_silences_are_read_only(collector: object) -> None:
    url = collector.url  # type: ignore[attr-defined]
    response = httpx.post(f"{url}/api/v1/silences", json={"matchers": ["a=b"], "duration_s": 60})
    assert response.status_code == 404 and "--admin-token-file" in response.text
    assert httpx.get(f"{url}/api/v1/silences").json() == []


def test_the_read_side_answers_and_is_documented(api: str) -> None:
    assert httpx.get(f"{api}/api/v1/alerts").json() == []
    assert httpx.get(f"{api}/api/v1/alerts", params={"state": "bogus"}).status_code == 422
    assert httpx.get(f"{api}/api/v1/alerts/rules").json() == []
    assert httpx.get(f"{api}/api/v1/alerts/notifications", params={"status": "failed"}).json() == []
    paths = httpx.get(f"{api}/openapi.json").json()["paths"]
    assert {"/api/v1/alerts", "/api/v1/alerts/rules", "/api/v1/alerts/notifications", "/api/v1/silences",
            "/api/v1/silences/{silence_id}"} <= set(paths)  # fmt: skip


def test_active_stragglers_are_a_gauge_on_the_collectors_metrics(collector: object) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from tests.alerts.telemetry import add_node

    url, dsn = collector.url, collector.dsn  # type: ignore[attr-defined]
    gpus = add_node(dsn, "n1", gpus=2)
    with psycopg.connect(dsn) as conn:
        conn.execute(
            "INSERT INTO straggler (job_id, node_id, gpu_id, cause, slowdown, started_at, declared_at, ended_at)"
            " SELECT '42', node_id, gpu_id, 'thermal', 0.25, now(), now(), NULL FROM gpu WHERE gpu_id = %s"
            " UNION ALL SELECT '43', node_id, NULL, 'slow_nic', 0.1, now(), now(), now() FROM gpu WHERE gpu_id = %s",
            (gpus[1], gpus[0]),
        )
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(f"{url}/metrics").text)}
    (sample,) = families["gpuscope_straggler_slowdown_ratio"].samples
    assert sample.labels == {"job_id": "42", "cluster": "test", "node": "n1", "gpu": "1", "cause": "thermal"}
    assert sample.value == 0.25, "only active stragglers; the ended one is not there"


def test_the_cli_creates_lists_and_expires_silences(
    api: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpuscope.cli import main

    token = tmp_path / "admin-token"
    token.write_text(ADMIN + "\n")
    auth = ["--collector", api, "--token-file", str(token)]
    assert main(["alerts", "silence", "add", *auth, "-m", "node=gpu-07", "--duration", "30m", "--comment", "fan"]) == 0
    created = json.loads(capsys.readouterr().out)
    assert created["state"] == "active" and created["created_by"] == "cli"
    assert main(["alerts", "silence", "list", "--collector", api]) == 0
    assert [s["id"] for s in json.loads(capsys.readouterr().out)] == [created["id"]]
    assert main(["alerts", "silence", "expire", *auth, str(created["id"])]) == 0
    assert json.loads(capsys.readouterr().out)["state"] == "expired"
    assert main(["alerts", "silence", "add", "--collector", api, "-m", "node=x"]) == 1, "no token"
    assert "HTTP 401" in capsys.readouterr().err
    assert main(["alerts", "silence", "add", *auth, "-m", "node=x", "--duration", "soon"]) == 2
    assert "is not a duration" in capsys.readouterr().err
