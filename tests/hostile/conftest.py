"""One `gpuscope collector` process per module, with every kind of token, over its own database; the
hypothesis settings every fuzz test here runs under; and the checks a module makes once it is done.

The collector runs as a process of its own (not in the test process, as tests/processes.py does) so
that its memory can be measured alone and everything it logs can be searched for the tokens."""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, settings

from gpuscope.core.embedded_pg import EmbeddedPostgres
from gpuscope.core.listen import free_loopback_port
from tests.commands import GPUSCOPE, stop_process, token_file, wait_healthy
from tests.conftest import new_database

# Deterministic (the same examples on every run, so CI cannot pass by luck and a failure reproduces),
# nothing kept between runs, no per-example deadline (a request's own limit is checked instead: 5 s).
# Each test picks its max_examples; together they keep a module under a minute on two cores.
settings.register_profile(
    "gpuscope-hostile",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=25,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
HOSTILE = settings.get_profile("gpuscope-hostile")

RESPONSE_LIMIT_S = 5.0  # no answer may take longer (a hang fails the test at this point too)
MAX_RSS_GROWTH_MB = 150  # the collector's resident memory after a module's fuzzing, over its baseline
MAX_DB_GROWTH_MB = 64  # what a module's fuzzing may add to its database

# The node whose own token the collector is given (docs/ingest-format.md, "Per-node tokens").
NODE_CLUSTER, NODE_NAME = "fuzz", "node-own"


@dataclass(frozen=True)
class HostileCollector:
    url: str
    dsn: str
    process: subprocess.Popen[bytes]
    log: Path
    ingest: str  # the shared ingest token
    node: str  # NODE_CLUSTER/NODE_NAME's own ingest token
    read: str
    admin: str
    baseline_rss_kib: int
    baseline_db_bytes: int

    def secrets(self) -> dict[str, str]:
        """What must never be logged: every token, and the database password."""
        found = {"ingest token": self.ingest, "node token": self.node, "read token": self.read,
                 "admin token": self.admin}  # fmt: skip
        password = psycopg.conninfo.conninfo_to_dict(self.dsn).get("password")
        if isinstance(password, str) and password:
            found["database password"] = password
        return found

    def rss_kib(self) -> int:
        return _rss_kib(self.process.pid)

    def with_baseline(self) -> HostileCollector:
        """This collector with its memory and database size now as the baseline (taken once a module has
        warmed it up: the first requests of each kind import and cache what every later one uses)."""
        return replace(self, baseline_rss_kib=self.rss_kib(), baseline_db_bytes=database_bytes(self.dsn))


def database_bytes(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="module")
def hostile_collector(
    postgres: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HostileCollector]:
    """`gpuscope collector` on 127.0.0.1 with a shared ingest token, a node's token, a read token and an
    admin token, over a fresh database; everything it writes to stdout and stderr goes to a file."""
    dsn = new_database(postgres)
    folder = tmp_path_factory.mktemp("hostile-collector")
    tokens = {kind: f"{kind}-{secrets.token_urlsafe(24)}" for kind in ("ingest", "node", "read", "admin")}
    node_tokens = folder / "node-tokens"
    node_tokens.write_text(f"{NODE_CLUSTER}/{NODE_NAME} {tokens['node']}\n")
    node_tokens.chmod(0o600)
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    log = folder / "collector.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*GPUSCOPE, "collector", "--db", dsn, "--listen", f"127.0.0.1:{port}",
             "--token-file", str(token_file(folder / "ingest-token", tokens["ingest"])),
             "--node-tokens-file", str(node_tokens),
             "--read-token-file", str(token_file(folder / "read-token", tokens["read"])),
             "--admin-token-file", str(token_file(folder / "admin-token", tokens["admin"]))],
            stdout=out,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_healthy(url, timeout=60, process=process)
        yield HostileCollector(
            url=url, dsn=dsn, process=process, log=log, **tokens,
            baseline_rss_kib=_rss_kib(process.pid), baseline_db_bytes=database_bytes(dsn),
        )  # fmt: skip
    finally:
        stop_process(process)


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def check_after_fuzz(collector: HostileCollector) -> None:
    """What a module's fuzzing must leave behind: a collector still up and answering, its memory back
    within MAX_RSS_GROWTH_MB of where it started, its database grown by at most MAX_DB_GROWTH_MB, and a
    log with no token (nor the database password) and no traceback in it."""
    assert collector.process.poll() is None, f"the collector exited ({collector.process.returncode})"
    assert httpx.get(f"{collector.url}/healthz", timeout=RESPONSE_LIMIT_S).status_code == 200
    grown_mb = (collector.rss_kib() - collector.baseline_rss_kib) / 1024
    assert grown_mb <= MAX_RSS_GROWTH_MB, f"the collector's RSS grew by {grown_mb:.0f} MB"
    db_grown_mb = (database_bytes(collector.dsn) - collector.baseline_db_bytes) / 2**20
    assert db_grown_mb <= MAX_DB_GROWTH_MB, f"the database grew by {db_grown_mb:.0f} MB"
    logged = collector.log.read_text(errors="replace")
    for what, secret in collector.secrets().items():
        assert secret not in logged, f"the collector logged the {what}"
    assert "collector listening on 127.0.0.1" in logged, f"the log was captured:\n{logged[-2000:]}"
    assert "Traceback" not in logged, f"the collector logged an exception:\n{logged[-4000:]}"
