"""What every replica process shares: its configuration, the ledger, its counters.

A replica reads its configuration from the ``BENCH_CONFIG`` environment variable (JSON), records
every execution with one INSERT into the ledger table, and every half second writes its
counters to ``<run_dir>/replica-<i>.json``: statements it sent (counted on the client, for
servers without pg_stat_statements) and anything adapter-specific. This module imports only
the standard library and psycopg, so it works in the project's and the peers' virtualenvs.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

LEDGER_TABLE = "bench_ledger"
LEDGER_DDL = f"""
CREATE UNLOGGED TABLE IF NOT EXISTS {LEDGER_TABLE} (
    job        text NOT NULL,
    scope      text NOT NULL,
    plan_time  timestamptz NOT NULL,
    runner     text NOT NULL,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    claimed_at timestamptz  -- when the scheduler decided to run it, if it says (celery beat)
)
"""
# The trivial handler: one INSERT per execution (psycopg and asyncpg placeholders).
LEDGER_INSERT = (
    f"INSERT INTO {LEDGER_TABLE} (job, scope, plan_time, runner) VALUES (%s, %s, %s, %s)"
)
# Many executions in one statement: the raw limit's "handler", and pgsched's batch handler.
LEDGER_INSERT_MANY = f"""
INSERT INTO {LEDGER_TABLE} (job, scope, plan_time, runner)
SELECT %(job)s, b.scope, b.plan_time, %(runner)s
FROM unnest(%(scopes)s::text[], %(plans)s::timestamptz[]) AS b(scope, plan_time)
"""
LEDGER_INSERT_DOLLAR = (
    f"INSERT INTO {LEDGER_TABLE} (job, scope, plan_time, runner) VALUES ($1, $2, $3, $4)"
)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Config:
    dsn: str
    job: str
    scopes: int
    every_s: int
    catch_up: str  # latest_only | every_plan
    catch_up_window_s: int
    max_plans_per_tick: int
    replica: int
    replicas: int
    run_dir: str
    concurrency: int
    ledger_pool: int
    # pgsched's rule (the other schedulers have no such setting)
    overlap: Literal["forbid", "allow"]

    @property
    def runner(self) -> str:
        return f"r{self.replica}"

    def scope_ids(self) -> list[str]:
        return [scope_id(i) for i in range(self.scopes)]

    def cron(self) -> str:
        return cron_for(self.every_s)


def scope_id(i: int) -> str:
    return f"{i:06d}"


def cron_for(every_s: int) -> str:
    """A cron expression firing every ``every_s`` seconds, aligned like pgsched's cadence."""
    if every_s < 60 and 60 % every_s == 0:
        return f"* * * * * */{every_s}"  # croniter's optional sixth field is seconds
    if every_s % 60 == 0 and every_s < 3600 and 3600 % every_s == 0:
        minutes = every_s // 60
        return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
    if every_s % 3600 == 0 and 86400 % every_s == 0:
        hours = every_s // 3600
        return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    raise ValueError(f"no cron expression for a cadence of {every_s} s")


def floor_plan(t: datetime, every_s: int) -> datetime:
    """The latest cadence plan at or before ``t`` (epoch-aligned, like pgsched)."""
    seconds = int((t - EPOCH).total_seconds() // every_s) * every_s
    return EPOCH + timedelta(seconds=seconds)


def due_plans(now: datetime, cfg: Config) -> list[datetime]:
    """The plans a scheduler should run at ``now`` under the workload's catch-up mode."""
    latest = floor_plan(now, cfg.every_s)
    if cfg.catch_up != "every_plan":
        return [latest]
    count = cfg.catch_up_window_s // cfg.every_s
    return [latest - timedelta(seconds=cfg.every_s * k) for k in range(count, -1, -1)]


def config() -> Config:
    return Config(**json.loads(os.environ["BENCH_CONFIG"]))


class Counters:
    """Statements this process sent (client side) plus adapter-specific numbers."""

    def __init__(self) -> None:
        self.statements = 0
        self.statement_s = 0.0
        self.extra: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, seconds: float) -> None:
        with self._lock:
            self.statements += 1
            self.statement_s += seconds

    def add(self, key: str, value: float) -> None:
        with self._lock:
            self.extra[key] = self.extra.get(key, 0.0) + value

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "statements": self.statements,
                "statement_s": self.statement_s,
                "extra": dict(self.extra),
                "at": time.time(),
            }


COUNTERS = Counters()


def _counted(query: Any) -> bool:
    if isinstance(query, str):  # the ledger's INSERT is a str; so is the pool's empty check
        return bool(query.strip()) and LEDGER_TABLE not in query
    return True


def count_psycopg_statements() -> None:
    """Count every statement psycopg sends (except the ledger's INSERTs and empty checks)."""
    import psycopg

    original_async = psycopg.AsyncCursor.execute
    original_sync = psycopg.Cursor.execute

    async def execute_async(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await original_async(self, query, *args, **kwargs)
        finally:
            if _counted(query):
                COUNTERS.note(time.perf_counter() - started)

    def execute_sync(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return original_sync(self, query, *args, **kwargs)
        finally:
            if _counted(query):
                COUNTERS.note(time.perf_counter() - started)

    psycopg.AsyncCursor.execute = execute_async  # type: ignore[method-assign]
    psycopg.Cursor.execute = execute_sync  # type: ignore[method-assign]


def start_reporting(cfg: Config) -> None:
    """Write the counters to the run directory every half second (daemon thread)."""
    path = Path(cfg.run_dir) / f"replica-{cfg.replica}.json"

    def loop() -> None:
        while True:
            write_counters(path)
            time.sleep(0.5)

    threading.Thread(target=loop, name="bench-counters", daemon=True).start()


def write_counters(path: Path) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(COUNTERS.snapshot()))
    tmp.replace(path)


class AsyncLedger:
    """The handler's one INSERT, over a few dedicated connections opened on first use.

    A plain queue of connections rather than psycopg_pool: thousands of handlers waiting for
    one of 8 connections cost a pool's per-waiter timeout machinery, which would be counted
    against whichever scheduler runs the handler.
    """

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._idle: Any = None
        self._opening: Any = None

    async def _connections(self) -> Any:
        if self._idle is None:
            import asyncio

            import psycopg

            if self._opening is None:
                self._opening = asyncio.Lock()
            async with self._opening:
                if self._idle is None:
                    idle: asyncio.Queue[Any] = asyncio.Queue()
                    for _ in range(self.cfg.ledger_pool):
                        idle.put_nowait(
                            await psycopg.AsyncConnection.connect(
                                self.cfg.dsn, autocommit=True, application_name="bench-ledger"
                            )
                        )
                    self._idle = idle
        return self._idle

    async def record(self, scope: str, plan_time: datetime) -> None:
        idle = self._idle if self._idle is not None else await self._connections()
        conn = await idle.get()
        try:
            await conn.execute(LEDGER_INSERT, (self.cfg.job, scope, plan_time, self.cfg.runner))
        finally:
            idle.put_nowait(conn)

    async def record_many(self, scopes: list[str], plans: list[datetime]) -> None:
        """Many executions with one INSERT (what the raw limit does for a claimed batch)."""
        idle = self._idle if self._idle is not None else await self._connections()
        conn = await idle.get()
        try:
            params = {"job": self.cfg.job, "runner": self.cfg.runner}
            await conn.execute(LEDGER_INSERT_MANY, {**params, "scopes": scopes, "plans": plans})
        finally:
            idle.put_nowait(conn)

    async def execute(self, query: str, params: tuple[Any, ...]) -> None:
        """Another statement on one of the ledger's connections (the seed's follow-up)."""
        idle = self._idle if self._idle is not None else await self._connections()
        conn = await idle.get()
        try:
            await conn.execute(query, params)
        finally:
            idle.put_nowait(conn)


async def handler(ledger: AsyncLedger, scope: str, plan_time: datetime) -> None:
    """The benchmark's handler, one coroutine per execution: one INSERT into the ledger.

    pgsched's app (``bench.peers.pgsched_app``) and the limit with a Python handler
    (``bench.peers.raw_handler``) both run this one.
    """
    await ledger.record(scope, plan_time)
