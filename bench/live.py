"""What the ledger and history workloads (``python -m bench.ledger``, ``python -m bench.history``)
share: their options, their database, the one pgsched replica whose fan-out fills the ledger,
and where their result goes."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import pg


def live_options(
    prog: str, doc: str | None, *, every: int, warmup: float, window: float, rows: int
) -> argparse.ArgumentParser:
    """The options of a benchmark that runs one replica's fan-out and fills history."""
    parser = argparse.ArgumentParser(prog=prog, description=doc)
    parser.add_argument("--dsn", help="a server to use (default: a private cluster)")
    parser.add_argument("--scopes", type=int, default=2000)
    parser.add_argument("--every", type=int, default=every)
    parser.add_argument("--warmup", type=float, default=warmup)
    parser.add_argument("--window", type=float, default=window)
    parser.add_argument("--rows", type=int, default=rows)
    return parser


@contextmanager
def replica(
    dsn: str, app: str, env: dict[str, str], schema: str = "pgsched"
) -> Iterator[subprocess.Popen[bytes]]:
    """``pgsched run --migrate`` of the module text ``app`` (its settings in ``env``) for the
    block, serving no HTTP; its log is printed if it ends with an error."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench_app.py"
        path.write_text(app)
        full = dict(os.environ, PGSCHED_DSN=dsn, PGSCHED_SCHEMA=schema, **env)
        log = (Path(tmp) / "replica.log").open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgsched", "run", "--migrate", str(path), "--no-http"],
            env=full,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield proc
        finally:
            proc.terminate()
            proc.wait(60)
            log.close()
            if proc.returncode not in (0, -15):
                tail = (Path(tmp) / "replica.log").read_text(errors="replace")[-3000:]
                print(f"the replica ended with {proc.returncode}:\n{tail}", file=sys.stderr)


@contextmanager
def database(server_dsn: str | None, name: str) -> Iterator[tuple[pg.Server, str]]:
    """The server (``--dsn``'s, or a private cluster) and the DSN of a fresh database ``name``
    on it for the block; the database is dropped when the block ends well, the private
    cluster stopped in any case."""
    server = pg.external(server_dsn) if server_dsn else pg.start_private()
    db = sql.Identifier(name)
    try:
        with psycopg.connect(server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(db))
            admin.execute(sql.SQL("CREATE DATABASE {}").format(db))
        yield server, server.dsn(name)
        with psycopg.connect(server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(db))
    finally:
        server.stop()


def write_result(results_dir: Path, prefix: str, result: dict[str, Any]) -> None:
    """``result`` to ``results_dir/<prefix>-<UTC stamp>.json``, and printed."""
    results_dir.mkdir(parents=True, exist_ok=True)
    name = results_dir / f"{prefix}-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    name.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps(result, indent=2, default=str))
