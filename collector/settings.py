"""Collector configuration: command-line flags override GPUSCOPE_COLLECTOR_* environment variables."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from collector.store.retention import Retention
from collector.store.timescale import Mode

# Exporters on every node push here, so the production default listens on all interfaces.
DEFAULT_LISTEN = "0.0.0.0:9410"


def default_data_dir() -> Path:
    """Where the embedded database and generated secrets live.

    Root (a system service): /var/lib/gpuscope, which the unprivileged PostgreSQL account can reach.
    Anyone else: $XDG_DATA_HOME/gpuscope, i.e. ~/.local/share/gpuscope.
    """
    if os.geteuid() == 0:
        return Path("/var/lib/gpuscope")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "gpuscope"


class CollectorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="GPUSCOPE_COLLECTOR_")

    listen: str = DEFAULT_LISTEN
    db: SecretStr | None = None  # a DSN carries a password: never printed
    data_dir: Path = default_data_dir()
    token_file: Path | None = None
    node_tokens_file: Path | None = None  # 'NODE TOKEN' per line: a token valid for one node only
    read_token_file: Path | None = None  # when set, the read API requires this bearer token
    max_body_bytes: int = 32 * 2**20
    max_concurrent_writes: int = 8
    workers: int = Field(default=1, ge=1, le=256)  # processes sharing the port (SO_REUSEPORT): one core each
    retention_days: float = Field(default=30.0, gt=0)  # raw samples older than this are dropped, day by day
    minute_rollup_days: float = Field(default=90.0, gt=0)  # at least retention_days
    timescaledb: Mode = "auto"  # use TimescaleDB when the server has it ("on": require it; "off": never)
    hour_rollup_days: float = Field(default=730.0, gt=0)  # hour rollups and events; at least minute_rollup_days
    alerts: bool = True  # evaluate alert rules (in one replica at a time)
    alert_rules: list[Path] = []  # rule files; none: the shipped defaults (alerts/default_rules.yaml)
    notify_config: Path | None = None  # receivers and routes; none: alerts are kept but not sent
    admin_token_file: Path | None = None  # bearer token for creating and expiring silences

    @model_validator(mode="after")
    def _tiers_outlive_finer_ones(self) -> CollectorSettings:
        self.retention()  # raises ValueError naming the rule, which pydantic reports
        return self

    def retention(self) -> Retention:
        return Retention(
            raw=timedelta(days=self.retention_days),
            minute_rollups=timedelta(days=self.minute_rollup_days),
            hour_rollups=timedelta(days=self.hour_rollup_days),
        )
