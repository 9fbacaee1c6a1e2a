"""What the benchmarks of a read at scale share (``bench.dashboard``, ``bench.explain``): a
schema of their own seeded by SQL as replicas would have left it, a read timed several times
(the first warms the caches and the pool) with its median and slowest, and a ``main`` that
seeds, measures, drops the schema and writes the results JSON.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import sql

import pgsched

T = TypeVar("T")
DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"


@dataclass(frozen=True)
class SeededSchema:
    """A migrated schema of a benchmark's own, filled by ``statements`` (``{s}``: the schema;
    ``%(name)s``: one of ``params``); ``counted`` names the tables whose rows the report
    gives (report key -> table)."""

    schema: str
    statements: Sequence[str]
    params: Mapping[str, Any]
    counted: Mapping[str, str] = field(default_factory=lambda: {"ledger_rows": "cron_executions"})

    def seed(self, dsn: str) -> dict[str, float]:
        """Drop, migrate and fill the schema; the seconds each statement took."""
        took: dict[str, float] = {}
        with psycopg.connect(dsn, autocommit=True) as conn:
            self._drop(conn)
            started = time.monotonic()
            admin = pgsched.Admin(dsn, self.schema)
            admin.migrate()
            admin.close()
            for i, text in enumerate(self.statements):
                step = time.monotonic()
                query = sql.SQL(text).format(s=sql.Identifier(self.schema))
                conn.execute(query, self.params if "%(" in text else None)
                took[f"seed step {i}"] = round(time.monotonic() - step, 1)
            took["seed total"] = round(time.monotonic() - started, 1)
        return took

    def exists(self, dsn: str) -> bool:
        with psycopg.connect(dsn) as conn:
            found = conn.execute(
                "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
            ).fetchone()
        return found is not None

    def facts(self, dsn: str) -> dict[str, Any]:
        """The counted tables' rows and the server's version."""
        facts: dict[str, Any] = {}
        with psycopg.connect(dsn) as conn:
            for key, table in self.counted.items():
                query = sql.SQL("SELECT count(*) FROM {}.{}").format(
                    sql.Identifier(self.schema), sql.Identifier(table)
                )
                row = conn.execute(query).fetchone()
                facts[key] = row[0] if row else None
            version = conn.execute("SHOW server_version").fetchone()
            facts["postgres"] = version[0] if version else None
        return facts

    def drop(self, dsn: str) -> None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            self._drop(conn)

    def _drop(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
        )


async def timed(call: Callable[[], Awaitable[T]], runs: int) -> tuple[dict[str, float], T]:
    """``call`` awaited ``runs`` + 1 times (the first warms up and is not counted): the median
    and slowest in milliseconds, and the last answer."""
    times = []
    answer = await call()
    for _ in range(runs):
        started = time.perf_counter()
        answer = await call()
        times.append((time.perf_counter() - started) * 1000)
    return {
        "median_ms": round(statistics.median(times), 1),
        "max_ms": round(max(times), 1),
    }, answer


def main(
    argv: list[str],
    seeded: SeededSchema,
    measure: Callable[[str], Coroutine[Any, Any, dict[str, Any]]],
    out: Path,
    fields: Mapping[str, Any],
) -> int:
    """``DSN [--keep]``: seed ``seeded`` (``--keep`` leaves it, and reuses it when present),
    ``measure`` it, and write ``fields``, the facts and what was measured to ``out``."""
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    dsn = argv[0] if argv else DEFAULT_DSN
    try:
        took = {"seed total": 0.0} if keep and seeded.exists(dsn) else seeded.seed(dsn)
        print(json.dumps(took), flush=True)
        facts = seeded.facts(dsn)
        measured = asyncio.run(measure(dsn))
    finally:
        if not keep:
            seeded.drop(dsn)
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **fields,
        **facts,
        "seed_s": took,
        **measured,
    }
    out.write_text(json.dumps(report, indent=1))
    print(f"written to {out}")
    return 0
