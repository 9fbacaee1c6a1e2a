"""``AsyncAdmin``: the operations core for asyncio code, over a small pool it owns. Every
operation of ``Admin`` is a coroutine here (inherited from the core), and nothing blocks the
running loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from ._admin import check_schema
from ._config import JobSpec
from ._dsn import require_dsn, resolve_dsn, resolve_transaction_pooling
from ._operations.core import Operations, _no_jobs
from ._storage.connection import database_error, make_pool, pooled
from ._storage.store import Conn, Store
from ._times import Duration, parse_duration


class AsyncAdmin(Operations):
    """Operator actions as coroutines: ``status``, ``runs``, ``trigger``, ``cancel``,
    ``pause``, ``resume``, ``backfill``, ``prune``, ``migrate`` (and the schedule operations
    of dynamic jobs).

    Use it as ``async with pgsched.AsyncAdmin(dsn) as admin:``; the pool (at most
    ``max_connections``) opens on entry, or on first use, and closes on exit or
    :meth:`aclose`. It belongs to the event loop it was opened on. The DSN is ``dsn``, else
    ``PGSCHED_DSN``, else ``DATABASE_URL``.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgsched",
        statement_timeout: Duration = "30s",
        *,
        max_connections: int = 4,
        jobs: Callable[[], Mapping[str, JobSpec]] = _no_jobs,
        app_name: str = "pgsched admin",
        transaction_pooling: bool | None = None,
    ) -> None:
        self._dsn = dsn
        self._timeout = parse_duration(
            statement_timeout, field="statement_timeout", allow_zero=False
        )
        self._max_connections = max_connections
        self._app_name = app_name
        self.transaction_pooling = resolve_transaction_pooling(transaction_pooling)
        self._pool: AsyncConnectionPool[Any] | None = None
        super().__init__(Store(check_schema(schema)), self._connection, jobs)

    async def __aenter__(self) -> AsyncAdmin:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def open(self) -> None:
        """Open the pool (done on entry, or by the first operation)."""
        if self._pool is not None:
            return
        pool = make_pool(
            require_dsn(resolve_dsn(self._dsn)),
            store=self._store,
            app_name=self._app_name,
            transaction_pooling=self.transaction_pooling,
            min_size=1,
            max_size=self._max_connections,
            timeout=max(5.0, self._timeout.total_seconds()),
            session=self._configure,
        )
        await pool.open()
        self._pool = pool

    async def aclose(self) -> None:
        """Close the pool; a later operation opens a new one."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _configure(self, conn: Conn) -> None:
        if not self.transaction_pooling:  # no session state through the pooler
            await self._store.configure_session(conn, self._timeout, self._timeout * 2)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        await self.open()
        assert self._pool is not None
        try:
            async with pooled(self._pool) as conn:
                yield conn
        except psycopg.Error as exc:  # pgsched's own error, one line naming the host
            raise database_error(exc, resolve_dsn(self._dsn)) from exc
