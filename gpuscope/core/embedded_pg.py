"""A private PostgreSQL server in a data directory, for the demo, the tests and `collector` without --db.

It listens on 127.0.0.1 only, with a generated password, runs as a child of this process (in its own
session, so a Ctrl-C in the terminal reaches us first and we stop it last) and is also told to shut
down if this process dies (Linux parent-death signal), so it never outlives us.

The data directory holds `pgdata/`, `pg-password` (0600) and `pg-dsn`: the address without the
password (0600 too), so that other processes of the same user find the server (running_dsn(), e.g.
`gpuscope dashboard --data-dir`). A restart listens on the recorded port again when it is free.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import logging
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from gpuscope.core.listen import free_loopback_port
from gpuscope.core.pg_lockfile import clear_stale_lock
from gpuscope.core.ports import ensure_free
from gpuscope.core.tokens import dsn_with_password_file

log = logging.getLogger(__name__)

SUPERUSER = "gpuscope"
DATABASE = "gpuscope"
PASSWORD_FILE = "pg-password"  # noqa: S105 - a file name, not a password
DSN_FILE = "pg-dsn"
PG_SYSTEM_USER = "postgres"  # initdb and postgres refuse to run as root
INSTALL_HINT = (
    "PostgreSQL server binaries (initdb, postgres) were not found on PATH, in /usr/lib/postgresql/*/bin "
    "or in the 'pgserver' Python package. Install them with 'apt-get install postgresql' (Debian/Ubuntu) "
    "or 'pip install pgserver', set GPUSCOPE_PG_BIN to their directory, or pass --db DSN to use an "
    "existing server."
)


EXITED_AT_START = "PostgreSQL exited at start-up"


class PostgresNotFound(RuntimeError):
    pass


class EmbeddedPostgresError(RuntimeError):
    pass


def find_pg_bin(debian_root: str = "/usr/lib/postgresql") -> Path:
    """The directory holding initdb and postgres: $GPUSCOPE_PG_BIN, PATH, Debian's layout, pgserver."""
    candidates: list[Path] = []
    if env := os.environ.get("GPUSCOPE_PG_BIN"):
        candidates.append(Path(env))
    if found := shutil.which("initdb"):
        candidates.append(Path(found).resolve().parent)
    debian = sorted(glob.glob(f"{debian_root}/*/bin"), key=lambda p: _version_key(Path(p).parent.name))
    candidates.extend(Path(p) for p in reversed(debian))
    with contextlib.suppress(ImportError):
        import pgserver

        candidates.append(Path(pgserver.__file__).parent / "pginstall" / "bin")
    for directory in candidates:
        if (directory / "initdb").is_file() and (directory / "postgres").is_file():
            return directory
    raise PostgresNotFound(INSTALL_HINT)


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(part) for part in name.split(".") if part.isdigit())


class EmbeddedPostgres:
    def __init__(self, data_dir: Path, settings: dict[str, str] | None = None) -> None:
        self.data_dir = data_dir
        self.pgdata = data_dir / "pgdata"
        self.settings = settings or {}
        self.port: int | None = None
        self._password_file = data_dir / PASSWORD_FILE
        self._log_path = data_dir / "postgres.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._user = _server_user()
        self._closing = threading.Event()  # stop() was called: no restart, no more waiting for readiness
        self._lifecycle = threading.RLock()  # stop() and a supervisor's restart, one at a time

    @property
    def dsn(self) -> str:
        if self.port is None:
            raise EmbeddedPostgresError("embedded PostgreSQL is not running")
        password = self._password_file.read_text().strip()
        return f"postgresql://{SUPERUSER}:{password}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def redacted_dsn(self) -> str:
        return f"postgresql://{SUPERUSER}:***@127.0.0.1:{self.port}/{DATABASE}"

    def start(self, timeout: float = 60.0) -> str:
        bin_dir = find_pg_bin()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bin_dir)
        # A restart keeps its address, so clients reconnect to it.
        self.port = self.port or self._recorded_port() or free_loopback_port()
        self._closing.clear()
        self._launch_after_crash(bin_dir, timeout)
        self._ensure_database()
        self._record_address()
        log.info("embedded PostgreSQL %s running from %s", self.redacted_dsn, self.pgdata)
        return self.dsn

    def restart(self, timeout: float = 60.0) -> None:
        """Start the server again after it exited, on the same data directory and port (the supervisor's
        step: clients reconnect to the address they know)."""
        with self._lifecycle:
            if self._closing.is_set():
                raise EmbeddedPostgresError("not restarted: the server is being stopped")
            if self._process is not None and self._process.poll() is None:
                return
            self._launch(find_pg_bin(), timeout)

    def exit_code(self) -> int | None:
        """None while the server runs; its exit status once it has exited (the process is reaped)."""
        process = self._process
        return None if process is None else process.poll()

    def _launch_after_crash(self, bin_dir: Path, timeout: float, settle_s: float = 15.0) -> None:
        """Start the server; one that exits at start-up is tried again for `settle_s`: after a crash, the
        old server's processes may hold its shared memory for a moment ("pre-existing shared memory
        block is still in use") before they notice they are orphans and exit."""
        deadline = time.monotonic() + settle_s
        while True:
            try:
                self._launch(bin_dir, timeout)
                return
            except EmbeddedPostgresError as exc:
                if not str(exc).startswith(EXITED_AT_START) or time.monotonic() > deadline:
                    raise
                log.warning("PostgreSQL exited at start-up; trying again: %s", str(exc).strip().splitlines()[-1])
                time.sleep(0.5)

    def _launch(self, bin_dir: Path, timeout: float) -> None:
        clear_stale_lock(self.pgdata)
        args = [
            str(bin_dir / "postgres"),
            "-D",
            str(self.pgdata),
            "-p",
            str(self.port),
            "-c",
            "listen_addresses=127.0.0.1",
            "-c",
            "unix_socket_directories=",
        ]
        for name, value in self.settings.items():
            args += ["-c", f"{name}={value}"]
        log_file = self._log_path.open("ab")
        self._process = subprocess.Popen(
            args,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            **self._as_server_user(),
            preexec_fn=_die_with_parent,
        )
        log_file.close()
        self._wait_ready(timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Fast shutdown (open transactions rolled back, a checkpoint); past `timeout`, immediate shutdown
        (SIGQUIT: nothing committed is lost, the next start replays the WAL)."""
        self._closing.set()  # a supervisor's restart in progress gives up
        with self._lifecycle:
            process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("PostgreSQL did not stop in %.0fs; sending SIGQUIT (immediate shutdown)", timeout)
            _quit(process, grace=5.0)

    def stop_now(self) -> None:
        """Past a shutdown deadline: immediate shutdown, and SIGKILL for a server that does not even
        take that (a frozen one). Committed transactions are in the WAL; the next start replays it."""
        self._closing.set()
        process = self._process
        if process is not None and process.poll() is None:
            _quit(process, grace=0.5)

    def __enter__(self) -> EmbeddedPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _initdb(self, bin_dir: Path) -> None:
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        password = secrets.token_urlsafe(24)
        self._password_file.write_text(password + "\n")
        self._password_file.chmod(0o600)
        pwfile = self.data_dir / ".initdb-pwfile"
        pwfile.write_text(password + "\n")
        try:
            if self._user is not None:
                uid, gid = self._user.pw_uid, self._user.pw_gid
                # The server's account must pass through our directory (not list it: 0o711).
                self.data_dir.chmod(self.data_dir.stat().st_mode | 0o011)
                os.chown(self.pgdata, uid, gid)
                os.chown(pwfile, uid, gid)
                self._check_reachable()
            pwfile.chmod(0o600)
            result = subprocess.run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(self.pgdata),
                    "-U",
                    SUPERUSER,
                    "-A",
                    "scram-sha-256",
                    f"--pwfile={pwfile}",
                    "-E",
                    "UTF8",
                    "--locale=C",
                ],
                capture_output=True,
                text=True,
                check=False,
                **self._as_server_user(),
            )
        finally:
            pwfile.unlink(missing_ok=True)
        if result.returncode != 0:
            raise EmbeddedPostgresError(f"initdb failed in {self.pgdata}:\n{result.stderr.strip()}")

    def _check_reachable(self) -> None:
        assert self._user is not None
        probe = subprocess.run(["test", "-w", str(self.pgdata)], check=False, **self._as_server_user())
        if probe.returncode != 0:
            raise EmbeddedPostgresError(
                f"PostgreSQL runs as the '{self._user.pw_name}' user, which cannot reach {self.pgdata}; "
                "choose a data directory that user can enter (for example --data-dir /var/lib/gpuscope)."
            )

    def _as_server_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _wait_ready(self, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self._closing.is_set():
            if self._process.poll() is not None:
                raise EmbeddedPostgresError(f"{EXITED_AT_START}:\n{self._log_tail()}")
            try:
                with psycopg.connect(self._dsn_for("postgres"), connect_timeout=2):
                    return
            except psycopg.OperationalError:
                time.sleep(0.1)
        self._process.send_signal(signal.SIGQUIT)  # not ready, or no longer wanted: no checkpoint to wait for
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(10)
        if self._closing.is_set():
            raise EmbeddedPostgresError("PostgreSQL start-up abandoned: the server is being stopped")
        raise EmbeddedPostgresError(f"PostgreSQL not ready after {timeout:.0f}s:\n{self._log_tail()}")

    def _ensure_database(self) -> None:
        with psycopg.connect(self._dsn_for("postgres"), autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            if not exists:
                conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(DATABASE)))

    def _record_address(self) -> None:
        path = self.data_dir / DSN_FILE
        partial = path.with_name(f".{DSN_FILE}.new")
        partial.unlink(missing_ok=True)
        with os.fdopen(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
            file.write(f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{DATABASE}\n")
        partial.replace(path)  # readers see the old address or the new one, never half of one

    def _recorded_port(self) -> int | None:
        """The port of this directory's last server, if it is free now."""
        port = _port_of(self.data_dir / DSN_FILE)
        if port is None:
            return None
        try:
            ensure_free("127.0.0.1", port)
        except OSError:
            return None
        return port

    def _dsn_for(self, database: str) -> str:
        return self.dsn.rsplit("/", 1)[0] + "/" + database

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no server log)"


def running_dsn(data_dir: Path) -> str:
    """The DSN, password included, of the embedded server a process (a collector without --db) runs in
    `data_dir`; EmbeddedPostgresError in one line when there is none or it does not answer."""
    start_one = f"start `gpuscope collector --data-dir {data_dir}` (without --db) first"
    try:
        address = (data_dir / DSN_FILE).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise EmbeddedPostgresError(
            f"no embedded database in {data_dir} (cannot read {DSN_FILE}: {exc.strerror}): {start_one}"
        ) from None
    dsn = dsn_with_password_file(address, data_dir / PASSWORD_FILE)
    try:
        psycopg.connect(dsn, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if "refused" in reason.lower():
            raise EmbeddedPostgresError(
                f"no database is running in {data_dir} (nothing answers at {address}): {start_one}"
            ) from None
        raise EmbeddedPostgresError(f"cannot connect to the embedded database in {data_dir}: {reason}") from None
    return dsn


def _port_of(dsn_file: Path) -> int | None:
    try:
        port = urlsplit(dsn_file.read_text(encoding="utf-8").strip()).port
    except (OSError, ValueError):
        return None
    return port


@contextlib.contextmanager
def throwaway_postgres(prefix: str, settings: dict[str, str] | None = None) -> Iterator[EmbeddedPostgres]:
    """A private server in a temporary directory, removed afterwards (benchmarks, `alerts check`)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        Path(tmp).chmod(0o711)  # as root, PostgreSQL runs as 'postgres' and must pass through
        with EmbeddedPostgres(Path(tmp) / "db", settings=settings) as pg:
            yield pg


def _server_user() -> pwd.struct_passwd | None:
    """The unprivileged account the server runs as when we are root; None otherwise."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(PG_SYSTEM_USER)
    except KeyError:
        raise EmbeddedPostgresError(
            f"running as root, and there is no '{PG_SYSTEM_USER}' user to run PostgreSQL as; create one "
            f"('useradd --system {PG_SYSTEM_USER}') or run gpuscope as an ordinary user"
        ) from None


def _quit(process: subprocess.Popen[bytes], grace: float) -> None:
    """Immediate shutdown (SIGQUIT); a server that has not gone after `grace` seconds (a frozen one) is
    killed. Either way nothing committed is lost: the next start replays the WAL."""
    process.send_signal(signal.SIGQUIT)
    try:
        process.wait(grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(5)


def _find_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # not Linux
        return None


# Looked up here, once: the supervisor restarts the server from a thread, and a child forked from a
# threaded process must not take the dynamic loader's lock (another thread may have held it at the fork).
_PRCTL = _find_prctl()
PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child after it changed user: ask Linux for SIGINT (fast shutdown) when we die."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGINT)
