"""The files one Patroni node of tests/patroni/cluster.py runs from: its configuration and the script that
creates the `gpuscope` database after bootstrap. Pure functions of the node's addresses and paths."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATABASE = "gpuscope"
SUPERUSER = "gpuscope"
REPLICATION_USER = "replicator"

# Patroni's cluster-wide settings, written to etcd by whichever node bootstraps. Why these values: the
# docstring of tests/patroni/cluster.py.
TIMINGS = {"ttl": 10, "loop_wait": 2, "retry_timeout": 5}
PG_PARAMETERS = {
    # a commit returns once the sync standby has replayed it: readable there when the client hears "done"
    "synchronous_commit": "remote_apply",
    "wal_log_hints": "on",  # pg_rewind needs it: a demoted primary rejoins without a fresh base backup
    "fsync": "off",  # the faults are SIGKILLs, never power losses: the page cache survives them
    "shared_buffers": "16MB",
    "max_connections": "40",
    "max_wal_senders": "8",
    "max_replication_slots": "8",
    "wal_keep_size": "64MB",
}


@dataclass(frozen=True)
class NodeAddresses:
    name: str
    directory: Path
    api_port: int
    pg_port: int


def node_config(
    node: NodeAddresses, *, scope: str, etcd_port: int, pg_bin: Path, passwords: dict[str, str]
) -> dict[str, Any]:
    """Patroni's YAML configuration for one node, as a dict (JSON is YAML: no YAML writer needed)."""
    d = node.directory
    return {
        "scope": scope,
        "name": node.name,
        "log": {"level": "INFO"},  # to stderr, which the fixture sends to the node's log file
        "restapi": {"listen": f"127.0.0.1:{node.api_port}", "connect_address": f"127.0.0.1:{node.api_port}"},
        "etcd3": {"hosts": [f"127.0.0.1:{etcd_port}"]},
        "bootstrap": {
            "dcs": {
                **TIMINGS,
                "maximum_lag_on_failover": 1024 * 1024,
                "primary_start_timeout": 0,  # a crashed primary fails over at once, not after 300 s of retries
                "synchronous_mode": True,
                "synchronous_mode_strict": False,
                "postgresql": {"use_pg_rewind": True, "use_slots": True, "parameters": PG_PARAMETERS},
            },
            "initdb": [{"encoding": "UTF8"}, {"locale": "C"}],
            "post_bootstrap": str(d / "post_bootstrap.sh"),
        },
        "postgresql": {
            "listen": f"127.0.0.1:{node.pg_port}",
            "connect_address": f"127.0.0.1:{node.pg_port}",
            "data_dir": str(d / "data"),
            "bin_dir": str(pg_bin),
            "pgpass": str(d / "pgpass"),
            # a replica's base backup starts at once, not after a spread checkpoint (minutes of nothing)
            "basebackup": [{"checkpoint": "fast"}],
            "use_unix_socket": True,  # Patroni's own connections: through the node's private socket
            "parameters": {"unix_socket_directories": str(d)},
            "authentication": {
                "superuser": {"username": SUPERUSER, "password": passwords[SUPERUSER]},
                "replication": {"username": REPLICATION_USER, "password": passwords[REPLICATION_USER]},
            },
            "pg_hba": [
                "local all all trust",
                "host all all 127.0.0.1/32 scram-sha-256",
                f"host replication {REPLICATION_USER} 127.0.0.1/32 scram-sha-256",
            ],
            # a node that cannot rewind or has diverged is cloned afresh rather than left out of the cluster
            "remove_data_directory_on_rewind_failure": True,
            "remove_data_directory_on_diverged_timelines": True,
        },
    }


def config_text(config: dict[str, Any]) -> str:
    return json.dumps(config, indent=2) + "\n"


def post_bootstrap_script(pg_bin: Path) -> str:
    """Patroni runs it once, on the node that initialises the cluster, with a connection string as its
    argument (Patroni 3 no longer creates databases or users from its configuration)."""
    return f'#!/bin/sh\nexec {pg_bin}/psql -X -q -v ON_ERROR_STOP=1 -c "CREATE DATABASE {DATABASE}" "$1"\n'
