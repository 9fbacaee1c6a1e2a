"""Transactional runs: the handler's writes through ``run.conn`` and the SUCCESS row commit in
one transaction, guarded by the lease token, so they commit if and only if the lease holds.
Owns the run's own connection; the engine's pool is never lent to a handler.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import psycopg

from ._config import JobSpec
from ._connection import DatabaseNotWritable, connect_options, require_writable
from ._model import Run
from ._outcomes import Outcome
from ._servers import Server, ServerWatch
from ._store import Store

Written = tuple[Outcome, datetime | None]
ToOutcome = Callable[[object], Outcome]
# An idle transaction may last as long as the handler may run, and a little more.
_IDLE_MARGIN = timedelta(seconds=10)


class Transactions:
    """Opens a connection per transactional run (``conninfo``, named ``app_name``)."""

    def __init__(
        self,
        conninfo: str,
        app_name: str,
        store: Store,
        *,
        transaction_pooling: bool,
        watch: ServerWatch | None = None,
    ) -> None:
        self._conninfo, self._app_name, self._store = conninfo, app_name, store
        # The replica's: a run commits only on the server the replica writes to.
        self._watch = watch if watch is not None else ServerWatch()
        # Behind a transaction-pooling PgBouncer no statement may be prepared and settings
        # are made inside the run's transaction only (SPEC §10).
        self._local = transaction_pooling

    def _connect_options(self) -> dict[str, Any]:
        return connect_options(self._conninfo, self._app_name, transaction_pooling=self._local)

    async def run_async(self, job: JobSpec, run: Run, outcome: ToOutcome) -> Written | None:
        """Run an ``async def`` handler in a transaction; None when the lease was lost (rolled
        back). Exceptions (the handler's, or ``outcome`` refusing the result) roll back too."""
        timeout = job.run_timeout
        conninfo = self._watch.steer(self._conninfo)
        conn = await psycopg.AsyncConnection.connect(conninfo, **self._connect_options())
        await require_writable(self._store, conn, self._watch)
        async with conn:
            await conn.set_autocommit(False)
            await self._store.configure_session(
                conn, timeout, timeout + _IDLE_MARGIN, local=self._local
            )
            run.conn = conn
            try:
                done = outcome(await job.handler(run))
                written = await self._store.finish(conn, [done.finish(run)])
                held = run.execution_id in written
                await (conn.commit() if held else conn.rollback())
                return (done, written[run.execution_id]) if held else None
            finally:
                run.conn = None

    def run_sync(self, job: JobSpec, run: Run, outcome: ToOutcome) -> Written | None:
        """:meth:`run_async` for a ``def`` handler, in its worker thread, on a sync connection."""
        timeout = job.run_timeout
        conninfo = self._watch.steer(self._conninfo)
        with psycopg.connect(conninfo, **self._connect_options()) as conn:
            self._require_server(conn)
            conn.autocommit = False
            self._store.configure_session_sync(
                conn, timeout, timeout + _IDLE_MARGIN, local=self._local
            )
            run.conn = conn
            try:
                done = outcome(job.handler(run))
                written = self._store.finish_sync(conn, [done.finish(run)])
                held = run.execution_id in written
                conn.commit() if held else conn.rollback()
                return (done, written[run.execution_id]) if held else None
            finally:
                run.conn = None

    def _require_server(self, conn: psycopg.Connection[Any]) -> None:
        """:func:`require_writable` for a sync connection (in a worker thread: the server is
        checked, never adopted; the replica's pool adopts a new one)."""
        state = self._store.server_state_sync(conn)
        address = f"{conn.info.host}:{conn.info.port}"
        why = "the server is in recovery (a standby)" if state["in_recovery"] else None
        if why is None and state["read_only"]:
            why = "the server is read-only (transaction_read_only is on)"
        if why is None:
            server = Server(state["system_identifier"], int(state["timeline"]), address)
            why = self._watch.refusal(server)
        if why is not None:
            raise DatabaseNotWritable(f"{why}: {address}")
