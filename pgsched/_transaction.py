"""Transactional runs: the handler's writes through ``run.conn`` and the SUCCESS row commit in
one transaction, guarded by the lease token, so they commit if and only if the lease holds."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

from ._model import Run
from ._store import Finish, Store

Written = tuple[Finish, datetime | None]
# An idle transaction may last as long as the handler may run, and a little more.
_IDLE_MARGIN = timedelta(seconds=10)


async def run_async(
    conninfo: str,
    app_name: str,
    store: Store,
    handler: Callable[[Run], Any],
    run: Run,
    run_timeout: timedelta,
    success: Callable[[object], Finish],
) -> Written | None:
    """Run an ``async def`` handler in a transaction; None when the lease was lost (rolled
    back). Exceptions (the handler's, or ``success`` refusing the result) roll back too."""
    async with await psycopg.AsyncConnection.connect(
        conninfo, autocommit=True, application_name=app_name
    ) as conn:
        await store.configure_session(conn, run_timeout, run_timeout + _IDLE_MARGIN)
        await conn.set_autocommit(False)
        run.conn = conn
        try:
            fin = success(await handler(run))
            written = await store.finish(conn, [fin])
            if fin.id in written:
                await conn.commit()
                return fin, written[fin.id]
            await conn.rollback()
            return None
        finally:
            run.conn = None


def run_sync(
    conninfo: str,
    app_name: str,
    store: Store,
    handler: Callable[[Run], Any],
    run: Run,
    run_timeout: timedelta,
    success: Callable[[object], Finish],
) -> Written | None:
    """:func:`run_async` for a ``def`` handler, in its worker thread, on a sync connection."""
    with psycopg.connect(conninfo, autocommit=True, application_name=app_name) as conn:
        store.configure_session_sync(conn, run_timeout, run_timeout + _IDLE_MARGIN)
        conn.autocommit = False
        run.conn = conn
        try:
            fin = success(handler(run))
            written = store.finish_sync(conn, [fin])
            if fin.id in written:
                conn.commit()
                return fin, written[fin.id]
            conn.rollback()
            return None
        finally:
            run.conn = None
