"""Private PostgreSQL servers for the failover tests: a primary, and on demand a hot standby
streaming from it (``pg_basebackup -R``) that can be promoted. Each listens on its own
loopback port; the binaries are found as the benchmark finds them (``bench/pg.py``), and as
root the servers run as the ``postgres`` account (initdb refuses root). Throw-away: no fsync.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.pg import _cluster_owner, find_bindir
from tests.helpers import free_port, wait_for

_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "'32MB'",
    "wal_level": "replica",
    "max_wal_senders": "5",
    "hot_standby": "on",
    "logging_collector": "off",
}


class Node:
    """One server of the private cluster."""

    def __init__(self, root: Path, name: str, bindir: Path, user: str | None) -> None:
        self.root, self.name, self.bindir, self.user = root, name, bindir, user
        self.data = root / name
        self.port = free_port()
        self._env = dict(os.environ, LC_ALL="C.UTF-8")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def run(self, *args: str, timeout: float = 120) -> None:
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
        log = str(self.root / f"{self.name}.log")
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
        with contextlib.suppress(subprocess.SubprocessError):
            self.pg_ctl("-m", mode, "-w", "stop")

    def promote(self) -> None:
        self.pg_ctl("-w", "promote")

    def sql(self, text: str | sql.Composed, params: Any = None) -> list[tuple[Any, ...]]:
        """Run ``text`` on a fresh session (pinned read-write, so it works on a primary made
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

        wait_for(applied, 10, what=f"default_transaction_read_only = {expected}")


class Cluster:
    """A primary and the standbys made from it, removed by :meth:`close`."""

    def __init__(self) -> None:
        found = find_bindir()
        if found is None:
            raise RuntimeError("no PostgreSQL binaries (initdb, pg_ctl, pg_basebackup)")
        self.bindir = found
        self.root = Path(tempfile.mkdtemp(prefix="pgsched-failover-"))
        self.root.chmod(0o755)
        self.user = _cluster_owner(self.root)
        self.nodes: list[Node] = []

    def primary(self) -> Node:
        node = Node(self.root, "primary", self.bindir, self.user)
        self.nodes.append(node)
        node.run(
            str(self.bindir / "initdb"),
            "-D",
            str(node.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
        )
        node.configure(
            dict(_SETTINGS, port=str(node.port), unix_socket_directories=f"'{self.root}'")
        )
        node.start()
        return node

    def standby(
        self, primary: Node, name: str = "standby", upstream_port: int | None = None
    ) -> Node:
        """A hot standby of ``primary``, streaming, started. It connects as application_name
        ``name`` (what ``synchronous_standby_names`` names) to ``upstream_port`` (a proxy in
        front of the primary, say), by default to the primary's own port."""
        node = Node(self.root, name, self.bindir, self.user)
        self.nodes.append(node)
        node.run(
            str(self.bindir / "pg_basebackup"),
            "-D",
            str(node.data),
            "-R",
            "-X",
            "stream",
            "-c",
            "fast",
            "-h",
            "127.0.0.1",
            "-p",
            str(primary.port),
            "-U",
            "postgres",
        )
        conninfo = (
            f"host=127.0.0.1 port={upstream_port or primary.port} user=postgres "
            f"application_name={name}"
        )
        node.configure({"port": str(node.port), "primary_conninfo": f"'{conninfo}'"})
        node.start()
        return node

    def close(self) -> None:
        for node in reversed(self.nodes):
            node.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
