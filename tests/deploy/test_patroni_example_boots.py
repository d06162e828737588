"""deploy/patroni's template boots: one node from the shipped patroni.yml and post_bootstrap.sh, against a
real etcd, bootstraps with the shipped cluster-wide settings, creates gpuscope's database and roles, and
takes the collector's DSN in the shipped form (several hosts, target_session_attrs=read-write, a password
file). One node: what three do on failover is tests/patroni's, with the same settings."""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from gpuscope.core.listen import free_loopback_port
from tests.deploy.patroni_examples import ExampleNode, example_node, shipped_dsn, shipped_pgpass


@pytest.fixture(scope="module")
def node() -> Iterator[ExampleNode]:
    if os.geteuid() != 0:
        pytest.skip("PostgreSQL runs as the postgres user, as under Debian's patroni.service: that takes root")
    # one node for the module (a boot costs 5-10 s); not pytest's tmp_path: its parents are private to
    # root, and the node runs as postgres
    root = Path(tempfile.mkdtemp(prefix="gpuscope-patroni-example-"))
    root.chmod(0o711)
    try:
        with example_node(root) as started:
            yield started
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_the_template_bootstraps_with_synchronous_replication_and_gpuscopes_roles(node: ExampleNode) -> None:
    assert node.api("/config")["synchronous_mode"] is True
    assert node.psql("SHOW synchronous_commit") == "remote_apply"
    assert node.psql("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'gpuscope'") == "gpuscope"
    assert node.psql("SELECT pg_has_role('gpuscope_ro', 'pg_read_all_data', 'MEMBER')") == "t"
    assert node.psql("SELECT count(*) FROM pg_roles WHERE rolname = 'rewind_user'") == "1"


def test_the_collectors_dsn_reaches_the_primary_through_a_dead_host_and_the_password_file(
    node: ExampleNode,
) -> None:
    """The shipped DSN with its hosts made loopback ports, the first one dead, and its passfile written
    from pgpass.example: libpq skips the dead host and takes the primary, and the role creates a table in
    its database, as the collector's migrations will."""
    password = secrets.token_urlsafe(18)  # README's `\password gpuscope`, done here by ALTER ROLE
    node.psql(f"ALTER ROLE gpuscope PASSWORD '{password}'")
    host, _, database, user, _ = shipped_pgpass()
    passfile = node.directory.parent / "pgpass-collector"
    passfile.write_text(f"{host}:{node.pg_port}:{database}:{user}:{password}\n")
    passfile.chmod(0o600)  # libpq ignores a password file others can read
    ports = f"{free_loopback_port()},{node.pg_port}"
    dsn = make_conninfo(**{**shipped_dsn(), "host": "127.0.0.1,127.0.0.1", "port": ports, "passfile": str(passfile)})
    with psycopg.connect(dsn) as conn:
        assert conn.info.port == node.pg_port
        conn.execute("CREATE TABLE example_probe (id int)")
        assert conn.execute("SELECT current_user, current_database()").fetchone() == ("gpuscope", "gpuscope")
