"""The shipped Patroni examples as tests read them (deploy/patroni, deploy/kubernetes/patroni), and the
bare-metal template run as a one-node cluster on loopback with an etcd of its own:

    with example_node(directory) as node:        # Patroni as `postgres`: the test runs as root
        node.psql("SHOW synchronous_commit")     # through the node's socket, by the template's peer rule
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from psycopg.conninfo import conninfo_to_dict

from gpuscope.core.dsn import check_dsn
from gpuscope.core.embedded_pg import PostgresNotFound, find_pg_bin
from gpuscope.core.listen import free_loopback_port
from tests.conftest import require_tool

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
BARE_METAL = DEPLOY / "patroni"
KUBERNETES = DEPLOY / "kubernetes" / "patroni"
SERVER_USER = "postgres"  # Debian's patroni.service runs Patroni, and so PostgreSQL, as this user


def template() -> dict[str, Any]:
    """deploy/patroni/patroni.yml, its YAML aliases resolved."""
    return dict(yaml.safe_load((BARE_METAL / "patroni.yml").read_text()))


def shipped_dsn() -> dict[str, str]:
    """The collector's DSN from deploy/patroni/db-dsn.example, as libpq reads it."""
    dsn = (BARE_METAL / "db-dsn.example").read_text().strip()
    check_dsn(dsn)  # the collector's own check of --db
    return {key: str(value) for key, value in conninfo_to_dict(dsn).items()}


def shipped_pgpass() -> list[str]:
    """The fields of deploy/patroni/pgpass.example's one line: host, port, database, user, password."""
    return (BARE_METAL / "pgpass.example").read_text().strip().split(":")


def pg_bin() -> Path:
    try:
        return find_pg_bin()
    except PostgresNotFound as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"PostgreSQL is required in CI: {exc}")
        pytest.skip(str(exc))


def loopback_node(directory: Path, etcd_port: int) -> tuple[dict[str, Any], int, int]:
    """The template as one node on loopback with its files in `directory`, and its REST API and
    PostgreSQL ports. Addresses, paths, passwords and subnets change; every rule and every cluster-wide
    setting is the shipped one."""
    config = copy.deepcopy(template())
    api_port, pg_port = free_loopback_port(), free_loopback_port()
    while pg_port == api_port:
        pg_port = free_loopback_port()
    config["scope"] = "gs-example-" + secrets.token_hex(3)
    config["restapi"].update(listen=f"127.0.0.1:{api_port}", connect_address=f"127.0.0.1:{api_port}")
    config["etcd3"]["hosts"] = [f"127.0.0.1:{etcd_port}"]
    config["bootstrap"]["post_bootstrap"] = str(directory / "post_bootstrap.sh")
    # the site's subnets (10.0.x.0/24 in the template) become loopback
    hba = [
        " ".join("127.0.0.1/32" if word.startswith("10.") else word for word in line.split())
        for line in config["postgresql"]["pg_hba"]
    ]
    config["bootstrap"]["pg_hba"] = hba
    postgresql = config["postgresql"]
    postgresql.update(listen=f"127.0.0.1:{pg_port}", connect_address=f"127.0.0.1:{pg_port}", pg_hba=hba)
    postgresql.update(data_dir=str(directory / "data"), bin_dir=str(pg_bin()), pgpass=str(directory / "pgpass"))
    postgresql["parameters"]["unix_socket_directories"] = str(directory)
    for role in postgresql["authentication"].values():
        role["password"] = secrets.token_urlsafe(18)
    return config, api_port, pg_port


@dataclass(frozen=True)
class ExampleNode:
    directory: Path
    api_port: int
    pg_port: int

    def api(self, path: str) -> Any:
        return httpx.get(f"http://127.0.0.1:{self.api_port}{path}", timeout=5).json()

    def psql(self, sql: str) -> str:
        """One statement's result through the node's socket as the OS user postgres, whom the template's
        `local all postgres peer` rule lets in."""
        server = pwd.getpwnam(SERVER_USER)
        args = [str(pg_bin() / "psql"), "-X", "-At", "-h", str(self.directory), "-p", str(self.pg_port)]
        args += ["-U", "postgres", "-d", "postgres", "-c", sql]
        result = subprocess.run(
            args, capture_output=True, text=True, timeout=30, check=False, env={"PATH": "/usr/bin:/bin"},
            user=server.pw_uid, group=server.pw_gid, extra_groups=[],
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()


@contextlib.contextmanager
def example_node(root: Path, timeout: float = 60.0) -> Iterator[ExampleNode]:
    """etcd and one Patroni from the template, under `root` (which the server user must be able to pass
    through: 0711), until the node is a running primary; everything stopped at the end."""
    patroni, etcd = require_tool("patroni"), require_tool("etcd")
    etcd_port, etcd_peer_port = free_loopback_port(), free_loopback_port()
    directory = root / "node"
    config, api_port, pg_port = loopback_node(directory, etcd_port)
    node = ExampleNode(directory, api_port, pg_port)
    _write_node_files(directory, config)
    logs = [root / "etcd.log", directory / "patroni.log"]
    client, peer = f"http://127.0.0.1:{etcd_port}", f"http://127.0.0.1:{etcd_peer_port}"
    etcd_args = [etcd, "--name", "etcd0", "--data-dir", str(root / "etcd"), "--initial-cluster", f"etcd0={peer}"]
    etcd_args += ["--listen-client-urls", client, "--advertise-client-urls", client]
    etcd_args += ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
    with contextlib.ExitStack() as stack:
        stack.enter_context(_running(etcd_args, logs[0], root, as_server_user=False))
        _wait_for(lambda: _answers(f"{client}/health"), "etcd to answer", 20, logs)
        stack.callback(_kill_orphaned_postmaster, directory / "data")
        stack.enter_context(_running([patroni, str(directory / "patroni.yml")], logs[1], directory, True))
        _wait_for(lambda: _answers(f"http://127.0.0.1:{api_port}/primary"), "a primary", timeout, logs)
        running = f"http://127.0.0.1:{api_port}/patroni"
        _wait_for(lambda: _answers(running, lambda r: r.json()["state"] == "running"), "it to run", 30, logs)
        yield node


def _write_node_files(directory: Path, config: dict[str, Any]) -> None:
    directory.mkdir(mode=0o700)
    (directory / "patroni.yml").write_text(json.dumps(config))  # JSON is YAML
    shutil.copy(BARE_METAL / "post_bootstrap.sh", directory / "post_bootstrap.sh")
    if os.geteuid() == 0:
        server = pwd.getpwnam(SERVER_USER)
        for path in [directory, *directory.iterdir()]:
            os.chown(path, server.pw_uid, server.pw_gid)


@contextlib.contextmanager
def _running(args: list[str], log: Path, cwd: Path, as_server_user: bool) -> Iterator[None]:
    """A process in a session of its own, its output in `log`; SIGTERM at the end (Patroni stops its
    PostgreSQL), SIGKILL to its group if it has not exited within 30 s."""
    user: dict[str, Any] = {}
    if as_server_user and os.geteuid() == 0:
        server = pwd.getpwnam(SERVER_USER)
        user = {"user": server.pw_uid, "group": server.pw_gid, "extra_groups": []}
    # a clean environment: the test run's PG* and PATRONI_* variables are not the node's
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(cwd)}
    with log.open("ab") as out:
        process = subprocess.Popen(
            args, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, **user,
        )  # fmt: skip
    try:
        yield
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(5)


def _kill_orphaned_postmaster(data_dir: Path) -> None:
    """A Patroni that had to be SIGKILLed leaves its PostgreSQL running (a session of its own): end it."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        pid = int((data_dir / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGQUIT)  # immediate shutdown: the data directory is thrown away anyway


def _answers(url: str, accept: Callable[[httpx.Response], bool] = lambda r: r.status_code == 200) -> bool:
    try:
        return accept(httpx.get(url, timeout=1.0))
    except (httpx.HTTPError, ValueError, KeyError):
        return False


def _wait_for(check: Callable[[], bool], what: str, timeout: float, logs: list[Path]) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            tails = [f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-20:]) for p in logs]
            raise TimeoutError(f"waited {timeout:.0f} s for {what}\n" + "\n".join(tails))
        time.sleep(0.2)
