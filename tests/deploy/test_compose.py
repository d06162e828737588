"""The compose file: its shape checked here, `docker compose config` where a compose client exists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpuscope.cli import _parser

COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose" / "compose.yaml"


def test_services_secrets_and_commands() -> None:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert set(doc["services"]) == {"timescaledb", "collector", "dashboard"}
    assert doc["services"]["timescaledb"]["image"].startswith("timescale/timescaledb:")
    assert doc["services"]["collector"]["depends_on"]["timescaledb"]["condition"] == "service_healthy"
    assert doc["services"]["dashboard"]["ports"] == ["127.0.0.1:8050:8050"], "the dashboard is not published"
    for service in ("collector", "dashboard"):
        assert set(doc["services"][service]["secrets"]) <= set(doc["secrets"])
        args = doc["services"][service]["entrypoint"]
        assert args[0] == "gpuscope", "gpuscope itself is PID 1: signals reach it, and no shell builds a DSN"
        parsed = _parser().parse_args(args[1:])  # flags gpuscope accepts
        assert parsed.db_password_file == Path("/run/secrets/db-password"), "the password comes from its secret"
        assert "@" in parsed.db and ":" not in parsed.db.split("://")[1].split("@")[0], "no password in the DSN"


def test_docker_compose_config() -> None:
    docker = shutil.which("docker")
    probe = subprocess.run([docker, "compose", "version"], capture_output=True, check=False) if docker else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no docker compose client here (the shape check above still runs)")
    assert docker is not None
    result = subprocess.run([docker, "compose", "-f", str(COMPOSE), "config", "--quiet"], capture_output=True,
                            text=True, timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
