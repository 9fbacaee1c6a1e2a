"""What the ledger and history workloads (``python -m bench.ledger``, ``python -m bench.history``)
share: their options, and the one pgsched replica whose fan-out fills the ledger."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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
