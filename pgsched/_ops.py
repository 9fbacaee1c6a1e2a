"""Operator actions, once, as coroutines on a connection: the library's sync API, the command
line and the HTTP API all call these."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from uuid import UUID

from ._errors import NotFoundError, PgschedError
from ._model import Scope
from ._store import Conn, Row, Store

PRUNE_BATCH = 1000


async def ensure_known(conn: Conn, store: Store, job: str) -> None:
    """Raise :class:`NotFoundError` unless some replica has registered ``job``."""
    if not await store.job_exists(conn, job):
        raise NotFoundError(f"unknown job {job!r}: no replica has registered it")


async def trigger(
    conn: Conn, store: Store, job: str, scope: Scope, at: datetime | None, max_attempts: int
) -> Row:
    """Insert (or return the already PENDING) manual run and wake every replica."""
    row = await store.trigger(conn, job, scope.kind, scope.id, at, max_attempts)
    await store.notify(conn, json.dumps({"event": "trigger", "job": job}))
    return row


async def set_paused(conn: Conn, store: Store, job: str, paused: bool) -> None:
    await store.set_paused(conn, job, paused)
    await store.notify(conn, json.dumps({"event": "pause" if paused else "resume", "job": job}))


async def cancel(conn: Conn, store: Store, execution_id: UUID) -> None:
    outcome = await store.cancel(conn, execution_id)
    if outcome == "missing":
        raise NotFoundError(f"execution {execution_id} does not exist")
    if outcome != "cancelled":
        raise PgschedError(
            f"execution {execution_id} is {outcome}; only PENDING runs can be cancelled"
        )


async def backfill(
    conn: Conn,
    store: Store,
    job: str,
    scopes: Sequence[Scope],
    plans: list[datetime],
    max_attempts: int,
) -> int:
    count = await store.backfill(
        conn, job, [s.kind for s in scopes], [s.id for s in scopes], plans, max_attempts
    )
    await store.notify(conn, json.dumps({"event": "backfill", "job": job}))
    return count


async def prune(conn: Conn, store: Store, older_than: timedelta, batch: int = PRUNE_BATCH) -> int:
    """Delete finished rows older than ``older_than`` in batches; returns how many."""
    total = 0
    while True:
        deleted = await store.prune_batch(conn, older_than, batch)
        total += deleted
        if deleted < batch:
            return total
