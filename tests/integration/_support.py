"""Helpers for the integration tests: row reads and seeding, DB clock, threads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from pgsched._records import Finish
from pgsched._storage.store import Store
from tests.helpers import wait_for

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Conn = psycopg.Connection[Any]


def db_now(db: Conn) -> datetime:
    """The database's clock (the only clock pgsched uses)."""
    row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    return row[0].astimezone(UTC)


def floor_to(t: datetime, step: timedelta) -> datetime:
    """``t`` floored to a multiple of ``step`` since the Unix epoch (cadence plan alignment)."""
    return EPOCH + ((t - EPOCH) // step) * step


def table(schema: str, name: str = "cron_executions") -> sql.Composable:
    return sql.Identifier(schema, name)


def rows(db: Conn, schema: str, job: str | None = None) -> list[dict[str, Any]]:
    """Every execution row (of ``job``), ordered by plan, scope."""
    query = sql.SQL(
        "SELECT * FROM {} {} ORDER BY plan_time, scope_kind, scope_id, created_at"
    ).format(table(schema), sql.SQL("WHERE job_name = %s" if job is not None else ""))
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(query, (job,) if job is not None else None)
        return cur.fetchall()


def row_by_id(db: Conn, schema: str, ident: UUID) -> dict[str, Any]:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(sql.SQL("SELECT * FROM {} WHERE id = %s").format(table(schema)), (ident,))
        found = cur.fetchone()
    assert found is not None, f"no row {ident}"
    return found


def count(db: Conn, schema: str, where: str = "true", params: tuple[Any, ...] = ()) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE ").format(table(schema)) + sql.SQL(where)  # type: ignore[arg-type]
    row = db.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def insert_row(db: Conn, schema: str, **cols: Any) -> dict[str, Any]:
    """Seed one execution row with the given columns (the table's defaults fill the rest)."""
    cols.setdefault("scope_kind", "global")
    cols.setdefault("scope_id", "global")
    cols.setdefault("trigger", "schedule")
    names = list(cols)
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING *").format(
        table(schema),
        sql.SQL(", ").join(sql.Identifier(n) for n in names),
        sql.SQL(", ").join(sql.Placeholder() for _ in names),
    )
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(query, [cols[n] for n in names])
        out = cur.fetchone()
    assert out is not None
    return out


def seed_running(
    db: Conn,
    schema: str,
    job: str,
    plan_time: datetime,
    *,
    stale_in: timedelta,
    attempt: int = 1,
    max_attempts: int = 3,
    runner_id: str = "old-runner",
    scope: pgsched.Scope = pgsched.GLOBAL,
) -> dict[str, Any]:
    """A RUNNING row held by ``runner_id``; ``stale_in`` < 0 makes its lease already stale."""
    now = db_now(db)
    return insert_row(
        db,
        schema,
        job_name=job,
        scope_kind=scope.kind,
        scope_id=scope.id,
        plan_time=plan_time,
        status="RUNNING",
        attempt=attempt,
        max_attempts=max_attempts,
        runner_id=runner_id,
        heartbeat_at=now - timedelta(minutes=10),
        started_at=now - timedelta(minutes=10),
        stale_after=now + stale_in,
    )


def make_stale(db: Conn, schema: str, ident: UUID) -> None:
    """Move a RUNNING row's lease into the past (simulates a holder that stopped heartbeating)."""
    db.execute(
        sql.SQL(
            "UPDATE {} SET stale_after = clock_timestamp() - interval '1 second' "
            "WHERE id = %s AND status = 'RUNNING'"
        ).format(table(schema)),
        (ident,),
    )


def finish_with_token(
    dsn: str, schema: str, ident: UUID, token: UUID, status: str = "SUCCESS"
) -> dict[UUID, datetime | None]:
    """A terminal write through pgsched's own SQL layer, as the holder of ``token`` would do."""

    async def go() -> dict[UUID, datetime | None]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            fin = Finish(ident, token, status, None, None, 99, '{"by": "old"}', 1, None)
            return await Store(schema).finish(conn, [fin])

    return asyncio.run(go())


def run_together(fns: list[Callable[[], Any]], timeout: float = 60) -> list[Any]:
    """Start ``fns`` in threads released together by a barrier; return results in order.

    Any exception in a thread is re-raised here.
    """
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def target(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout)
            results[i] = fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=target, args=(i, fn), daemon=True) for i, fn in enumerate(fns)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in time"
    if errors:
        raise errors[0]
    return results


@contextmanager
def running(scheduler: pgsched.Scheduler, stop_timeout: float = 30) -> Iterator[threading.Thread]:
    """``scheduler.run()`` in a thread for the duration of the block; stopped and joined after."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            scheduler.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"run-{scheduler.runner_id}", daemon=True)
    thread.start()
    try:
        yield thread
    finally:

        def stopped() -> bool:
            scheduler.stop()  # repeated: a stop() before run() has started is not kept
            thread.join(0.2)
            return not thread.is_alive()

        wait_for(stopped, stop_timeout, interval=0.05, what="the scheduler thread to stop")
    assert not errors, f"run() raised {errors[0]!r}"


class Recorder:
    """Thread-safe record of the Runs a handler saw, plus its peak concurrency."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[pgsched.Run] = []
        self.active = 0
        self.peak = 0

    def enter(self, run: pgsched.Run) -> None:
        with self.lock:
            self.runs.append(run)
            self.active += 1
            self.peak = max(self.peak, self.active)

    def leave(self) -> None:
        with self.lock:
            self.active -= 1

    def __len__(self) -> int:
        with self.lock:
            return len(self.runs)


def wait_for_fresh_tick(s: pgsched.Scheduler, timeout: float = 10) -> None:
    """Wait until ``s.run()`` has completed a whole tick that started after this call."""
    marker = time.monotonic()

    def ticked_after(t: float) -> float | None:
        runtime = s._runtime
        last = runtime.last_tick_ok if runtime is not None else None
        return last if last is not None and last > t else None

    first_end = wait_for(lambda: ticked_after(marker), timeout, interval=0.02, what="a tick")
    wait_for(lambda: ticked_after(first_end), timeout, interval=0.02, what="a further tick")


@contextmanager
def as_role(db: Conn, role: str | None) -> Iterator[None]:
    """Run the block's statements on ``db`` as ``role`` (e.g. the schema owner, so that the
    tables it creates get the runtime role's default privileges); no-op for None."""
    if role is None:
        yield
        return
    db.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        yield
    finally:
        db.execute("RESET ROLE")
