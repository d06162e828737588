"""A real three-node PostgreSQL cluster under Patroni, with etcd as its store, on loopback, for tests.

    cluster = PatroniCluster(directory)          # or the `patroni_cluster` fixture (tests/patroni/conftest.py)
    cluster.start()                              # a leader, a synchronous standby, the `gpuscope` database
    old = cluster.primary()
    cluster.kill_postmaster(old)                 # or kill_patroni(old): its postgres lives on
    new = cluster.wait_for_primary(not_in={old})
    psycopg.connect(cluster.dsn())               # libpq's multi-host DSN finds the read-write one
    cluster.stop()                               # every process of the cluster gone

What it runs
- One etcd 3.4 (Debian's etcd-server), a single member on free 127.0.0.1 client and peer ports, data in
  DIR/etcd. Patroni talks to it through its v3 API (Patroni's `etcd3`: no v2 API to enable).
- Three Patroni 3.0 nodes, node0-node2, each with its own REST API port and PostgreSQL port on 127.0.0.1
  and its unix socket in its own directory DIR/nodeN (config patroni.yml, data/, pgpass). As root, Patroni
  and so PostgreSQL run as the `postgres` user (PostgreSQL refuses root): DIR is 0711 and the node
  directories are that user's. Passwords (scram-sha-256 on 127.0.0.1): superuser `gpuscope`, replication
  user `replicator`; the first node to bootstrap creates the database `gpuscope`.
- `synchronous_mode: true`: Patroni keeps one standby in synchronous_standby_names (its `sync_standby`)
  and only that one may be promoted, and synchronous_commit=remote_apply: a commit returns once the sync
  standby has replayed it, so what a client was told is committed is on a standby, and readable there.
  Not `synchronous_mode_strict`: with two nodes down the last one keeps accepting writes unreplicated,
  rather than blocking every commit; the guarantee that matters here (an acknowledged commit survives a
  failover, because only the sync standby is promoted) holds either way, and the fault tests that kill
  nodes one after another should see a cluster that degrades, not one that hangs.
- Timings: ttl 10 s (the leader key's lease), loop_wait 2 s (each node's cycle), retry_timeout 5 s (etcd
  and PostgreSQL calls before a node gives up its leadership), primary_start_timeout 0: a crashed primary
  is not restarted in place, the sync standby takes over at the next cycle (a postmaster SIGKILL fails
  over in a few seconds). A dead Patroni on the primary is only noticed when its lease runs out: a
  failover in ttl + loop_wait, about 12 s, while that node's PostgreSQL goes on running as a primary that
  no standby follows (its commits wait for a sync standby that has left, so none is acknowledged) until
  its Patroni comes back and demotes it (pg_rewind, then it follows the new primary). Patroni 3.0.2,
  restarted there, first reloads that PostgreSQL without synchronous_standby_names and only then demotes
  it: a commit left waiting on it is acknowledged in that moment, and then rewound away. Until then
  libpq's target_session_attrs=read-write cannot tell it from the new primary: the multi-host DSN reaches
  whichever of the two it lists first. Production uses ttl 30; below 10, etcd's or a busy 2-core test
  machine's pauses of a few seconds would cost the leader its key, failovers nobody asked for.
- fsync=off: every fault here is a process killed, which never loses what the kernel already has.

Use
- start(timeout), stop(); members() (Patroni's GET /cluster), primary(), sync_standby(),
  wait_for_primary(timeout, not_in=...), wait_for_sync_standby(timeout, not_in=...), wait_healthy(timeout)
- dsn(target_session_attrs="read-write", database=...): libpq's multi-host DSN over the three nodes;
  node_dsn(name, database=...): one node's.
- kill_postmaster(name), kill_patroni(name), restart_patroni(name); postmaster_pid(name);
  `with replay_frozen(name):` a standby that receives WAL but applies none (remote_apply commits wait).
- fixture_processes(): the pids of everything the cluster started that still runs (stop() leaves none).
Every wait is bounded; a timeout says what it waited for and ends with each process's last log lines
(DIR/etcd.log, DIR/nodeN/patroni.log, which holds that node's PostgreSQL's output too).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import secrets
import signal
import subprocess
import time
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psycopg

from gpuscope.core.embedded_pg import find_pg_bin
from gpuscope.core.listen import free_loopback_port
from tests.patroni.config import (
    DATABASE,
    REPLICATION_USER,
    SUPERUSER,
    NodeAddresses,
    config_text,
    node_config,
    post_bootstrap_script,
)

T = TypeVar("T")

NODES = ("node0", "node1", "node2")
SERVER_USER = "postgres"  # as root, PostgreSQL (and so Patroni, its parent) runs as this user


class PatroniCluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.scope = "gs-" + secrets.token_hex(4)  # PostgreSQL's cluster_name: in every backend's title
        self.passwords = {SUPERUSER: secrets.token_urlsafe(18), REPLICATION_USER: secrets.token_urlsafe(18)}
        self.user = pwd.getpwnam(SERVER_USER) if os.geteuid() == 0 else None
        ports = _distinct_free_ports(2 + 2 * len(NODES))
        self.etcd_port, self.etcd_peer_port = ports[0], ports[1]
        self.nodes = {
            name: NodeAddresses(name, root / name, api_port=ports[2 + 2 * i], pg_port=ports[3 + 2 * i])
            for i, name in enumerate(NODES)
        }
        self._etcd: subprocess.Popen[bytes] | None = None
        self._patroni: dict[str, subprocess.Popen[bytes]] = {}
        self._process_groups: set[int] = set()  # every Patroni's, dead or alive (its helpers share it)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, timeout: float = 90.0) -> None:
        self.root.chmod(0o711)  # the server user passes through to its node directories
        self._start_etcd()
        self._wait_for(self._etcd_answers, "etcd to answer", 20.0)
        pg_bin = find_pg_bin()
        for node in self.nodes.values():
            self._write_node_files(node, pg_bin)
        for name in NODES:
            self._start_patroni(name)
        self.wait_healthy(timeout)

    def stop(self, timeout: float = 20.0) -> None:
        """Whatever state the cluster is in: Patroni stops its PostgreSQL (SIGTERM, fast shutdown); what
        is left after `timeout` is killed, process group by process group."""
        deadline = time.monotonic() + timeout
        for process in self._patroni.values():
            if process.poll() is None:
                process.terminate()
        for process in self._patroni.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
        for group in self._process_groups:
            _kill_group(group)
        for process in self._patroni.values():
            process.wait(5)
        for name in NODES:
            pid = self.postmaster_pid(name)
            if pid is not None:
                _kill_group(_process_group(pid) or pid)
        if self._etcd is not None:
            self._etcd.terminate()
            try:
                self._etcd.wait(5)
            except subprocess.TimeoutExpired:
                self._etcd.kill()
                self._etcd.wait(5)
        for pid in self.fixture_processes():  # backends orphaned by a killed postmaster, say
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._wait_for(lambda: not self.fixture_processes(), "the cluster's processes to exit", 10.0)
        for name in NODES:
            self._remove_shared_memory(name)

    def __enter__(self) -> PatroniCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- state -----------------------------------------------------------------------------------------

    def members(self) -> list[dict[str, Any]]:
        """Patroni's view (GET /cluster) from the first node whose REST API answers: each member's name,
        role (leader, sync_standby, replica), state (running, stopped, starting, ...), host, port, lag."""
        for name in NODES:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                response = httpx.get(f"{self._api(name)}/cluster", timeout=1.0)
                if response.status_code == 200:
                    return list(response.json()["members"])
        raise ConnectionError("no Patroni REST API answers GET /cluster")

    def primary(self) -> str | None:
        """The member holding the leader key with its PostgreSQL running (not necessarily promoted yet)."""
        return self._member_with_role("leader")

    def sync_standby(self) -> str | None:
        return self._member_with_role("sync_standby")

    def wait_for_primary(self, timeout: float = 30.0, not_in: Collection[str] = ()) -> str:
        """The name of the leader, once its PostgreSQL takes writes (a promotion has finished)."""

        def writable_leader() -> str | None:
            name = self._quietly(self.primary)
            return name if name and name not in not_in and self._is_writable(name) else None

        excluding = f" other than {', '.join(sorted(not_in))}" if not_in else ""
        return self._wait_for(writable_leader, f"a writable primary{excluding}", timeout)

    def wait_for_sync_standby(self, timeout: float = 30.0, not_in: Collection[str] = ()) -> str:
        """The name of the synchronous standby, once the primary's pg_stat_replication shows it `sync`."""

        def confirmed() -> str | None:
            primary, standby = self._quietly(self.primary), self._quietly(self.sync_standby)
            if not primary or not standby or standby in not_in:
                return None
            return standby if self._replication_states(primary).get(standby) == "sync" else None

        return self._wait_for(confirmed, "a synchronous standby", timeout)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        """Until the cluster is whole again: a writable primary that both other members stream from, one
        of them its synchronous standby. (Patroni's `running` alone is not enough: a node reports it
        from its first cycle, before it demotes and rewinds the primary it found running.)"""

        def whole() -> bool:
            primary, standby = self._quietly(self.primary), self._quietly(self.sync_standby)
            if not primary or not standby or not self._is_writable(primary):
                return False
            states = self._replication_states(primary)
            return sorted(states) == sorted(n for n in NODES if n != primary) and states[standby] == "sync"

        self._wait_for(whole, "a primary with both standbys streaming, one of them synchronous", timeout)

    # -- addresses -------------------------------------------------------------------------------------

    def dsn(self, target_session_attrs: str = "read-write", database: str = DATABASE) -> str:
        hosts = ",".join(f"127.0.0.1:{self.nodes[name].pg_port}" for name in NODES)
        return f"{self._credentials()}@{hosts}/{database}?target_session_attrs={target_session_attrs}"

    def node_dsn(self, name: str, database: str = DATABASE) -> str:
        return f"{self._credentials()}@127.0.0.1:{self.nodes[name].pg_port}/{database}"

    # -- faults ----------------------------------------------------------------------------------------

    def postmaster_pid(self, name: str) -> int | None:
        """The pid in the node's postmaster.pid, if that process is alive."""
        try:
            pid = int((self.nodes[name].directory / "data" / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if _alive(pid) else None

    def kill_postmaster(self, name: str) -> int:
        """SIGKILL the node's postmaster alone (its backends notice and exit); returns its pid."""
        pid = self.postmaster_pid(name)
        if pid is None:
            raise RuntimeError(f"{name} has no running postmaster\n{self.log_tail()}")
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_patroni(self, name: str) -> None:
        """SIGKILL the node's Patroni (and its helper processes); its PostgreSQL, in a session of its
        own, goes on running."""
        process = self._patroni[name]
        _kill_group(process.pid)
        process.wait(5)

    def restart_patroni(self, name: str) -> None:
        """Start the node's Patroni again (SIGKILL first if it still runs); it adopts or restarts its
        PostgreSQL, as the leader key in etcd says: a primary left running without it is demoted."""
        if self._patroni[name].poll() is None:
            self.kill_patroni(name)
        self._start_patroni(name)

    @contextlib.contextmanager
    def replay_frozen(self, name: str) -> Iterator[None]:
        """The standby's WAL replay stopped (its startup process SIGSTOPped, SIGCONT after) while it still
        receives and flushes WAL. Not pg_wal_replay_pause(): Patroni resumes that at its next cycle."""
        with psycopg.connect(self.node_dsn(name, "postgres"), connect_timeout=3) as conn:
            row = conn.execute("SELECT pid FROM pg_stat_activity WHERE backend_type = 'startup'").fetchone()
        if row is None:
            raise RuntimeError(f"{name} is not replaying WAL (no startup process): not a standby")
        os.kill(row[0], signal.SIGSTOP)
        try:
            yield
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(row[0], signal.SIGCONT)

    def fixture_processes(self) -> list[int]:
        """Every live process of this cluster: those naming its directory (etcd, Patroni, postmasters),
        those in a Patroni's process group, and PostgreSQL's children (titled with the cluster name)."""
        root, title = str(self.root).encode(), f"postgres: {self.scope}:".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                group = _process_group(int(entry.name))
            except OSError:
                continue
            if root in cmdline or cmdline.startswith(title) or group in self._process_groups:
                found.append(int(entry.name))
        return found

    def log_tail(self, lines: int = 15) -> str:
        tails = []
        for path in [self.root / "etcd.log", *(node.directory / "patroni.log" for node in self.nodes.values())]:
            with contextlib.suppress(OSError):
                text = path.read_text(errors="replace").splitlines()[-lines:]
                tails.append(f"--- {path.relative_to(self.root)}\n" + "\n".join(text))
        return "\n".join(tails)

    # -- internals -------------------------------------------------------------------------------------

    def _start_etcd(self) -> None:
        peer, client = f"http://127.0.0.1:{self.etcd_peer_port}", f"http://127.0.0.1:{self.etcd_port}"
        args = ["etcd", "--name", "etcd0", "--data-dir", str(self.root / "etcd")]
        args += ["--listen-client-urls", client, "--advertise-client-urls", client]
        args += ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
        args += ["--initial-cluster", f"etcd0={peer}", "--initial-cluster-token", self.scope]
        with (self.root / "etcd.log").open("ab") as log:
            # a session of its own: a terminal's Ctrl-C reaches pytest, which then stops the cluster
            self._etcd = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def _etcd_answers(self) -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(f"http://127.0.0.1:{self.etcd_port}/health", timeout=1.0).status_code == 200
        return False

    def _write_node_files(self, node: NodeAddresses, pg_bin: Path) -> None:
        node.directory.mkdir(mode=0o700)
        config = node_config(node, scope=self.scope, etcd_port=self.etcd_port, pg_bin=pg_bin, passwords=self.passwords)
        files = {
            "patroni.yml": (config_text(config), 0o600),
            "post_bootstrap.sh": (post_bootstrap_script(pg_bin), 0o700),
        }
        for file_name, (text, mode) in files.items():
            (node.directory / file_name).write_text(text)
            (node.directory / file_name).chmod(mode)
        (node.directory / "patroni.log").touch()
        if self.user is not None:
            for path in [node.directory, *node.directory.iterdir()]:
                os.chown(path, self.user.pw_uid, self.user.pw_gid)

    def _start_patroni(self, name: str) -> None:
        directory = self.nodes[name].directory
        as_user: dict[str, Any] = {}
        if self.user is not None:
            as_user = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        # A clean environment: the test run's PG* variables, virtualenv and HOME are not the node's.
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(directory)}
        with (directory / "patroni.log").open("ab") as log:
            process = subprocess.Popen(
                ["patroni", str(directory / "patroni.yml")],
                cwd=directory,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its group: Patroni and its helpers, not its PostgreSQL
                **as_user,
            )
        self._patroni[name] = process
        self._process_groups.add(process.pid)

    def _remove_shared_memory(self, name: str) -> None:
        """A killed postmaster leaves its System V segment behind (56 bytes, but one per kill, until the
        host's limit) and its postmaster.pid naming it; the next postmaster there would remove it, and
        there is none. A cleanly stopped server has removed both."""
        try:
            lines = (self.nodes[name].directory / "data" / "postmaster.pid").read_text().splitlines()
            shmid = int(lines[6].split()[1])  # line 7: "<key> <shmid>"
        except (OSError, IndexError, ValueError):
            return
        subprocess.run(["ipcrm", "-m", str(shmid)], capture_output=True, check=False)

    def _api(self, name: str) -> str:
        return f"http://127.0.0.1:{self.nodes[name].api_port}"

    def _credentials(self) -> str:
        return f"postgresql://{SUPERUSER}:{self.passwords[SUPERUSER]}"

    def _member_with_role(self, role: str) -> str | None:
        for member in self.members():
            if member.get("role") == role and member.get("state") == "running":
                return str(member["name"])
        return None

    def _is_writable(self, name: str) -> bool:
        try:
            with psycopg.connect(self.node_dsn(name, "postgres"), connect_timeout=2) as conn:
                row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
        except psycopg.Error:
            return False
        return row is not None and row[0] is False

    def _replication_states(self, primary: str) -> dict[str, str]:
        """The primary's streaming standbys, by name, and their sync_state (sync, async, potential)."""
        query = "SELECT application_name, sync_state FROM pg_stat_replication WHERE state = 'streaming'"
        try:
            with psycopg.connect(self.node_dsn(primary, "postgres"), connect_timeout=2) as conn:
                return {str(name): str(state) for name, state in conn.execute(query).fetchall()}
        except psycopg.Error:
            return {}

    def _quietly(self, read: Callable[[], T]) -> T | None:
        """A read of Patroni's view, or None while no REST API answers (all restarting, say)."""
        try:
            return read()
        except ConnectionError:
            return None

    def _wait_for(self, check: Callable[[], T | None], what: str, timeout: float) -> T:
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}\n{self.log_tail()}")
            time.sleep(0.2)


def _distinct_free_ports(count: int) -> list[int]:
    """`count` different free loopback ports (two lookups may return the same one: the socket is closed)."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_loopback_port()
        if port not in ports:
            ports.append(port)
    return ports


def _process_group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def _kill_group(group: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
