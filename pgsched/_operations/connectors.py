"""Where the operations core gets its connections, and what their errors become. An ``Admin``
keeps up to :data:`KEEP_IDLE` idle connections on the portal's loop between calls
(:class:`KeptConnections`); an ``AsyncAdmin`` has a small pool of its own
(:class:`PooledConnections`). Either refuses a server that cannot take writes, bounds every
statement, and raises a driver error as pgsched's ``DatabaseError`` naming the hosts.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta

import psycopg
from psycopg_pool import AsyncConnectionPool

from .._dsn import require_dsn, resolve_dsn, resolve_transaction_pooling
from .._portal import PORTAL
from .._storage.answering import ANSWER_GRACE_S, BoundedAsyncConnection
from .._storage.connection import (
    WritablePool,
    connect_options,
    database_error,
    first_answer,
    make_pool,
    not_writable,
    pooled,
    require_writable,
)
from .._storage.servers import ServerWatch
from .._storage.statements import Conn
from .._storage.store import Store
from .._times import Duration, parse_duration
from .core import check_schema

KEEP_IDLE = 4  # connections an Admin keeps open between actions
_FORKED_AWAY: list[Conn] = []


@dataclass(frozen=True, slots=True)
class Target:
    """Where an operator's connections go and how each is set up: the DSN (None: read from
    ``PGSCHED_DSN``, else ``DATABASE_URL``, when first needed), the schema, the application
    name, whether a transaction pooler is in between, every statement's timeout."""

    dsn: str | None
    schema: str
    app_name: str
    transaction_pooling: bool
    statement_timeout: timedelta

    @classmethod
    def parse(
        cls,
        dsn: str | None,
        schema: str,
        statement_timeout: Duration,
        app_name: str,
        transaction_pooling: bool | None,
    ) -> Target:
        """A facade's options checked: ConfigError naming the one that is wrong."""
        checked = check_schema(schema)
        timeout = parse_duration(statement_timeout, field="statement_timeout", allow_zero=False)
        pooling = resolve_transaction_pooling(transaction_pooling)
        return cls(dsn, checked, app_name, pooling, timeout)


class KeptConnections:
    """An Admin's connections: one per action, reused on the portal's loop (where up to
    :data:`KEEP_IDLE` stay open between actions), each checked and given the statement
    timeout (twice that for an idle transaction) unless a transaction pooler is in between."""

    def __init__(self, target: Target) -> None:
        self._dsn, self._app_name = target.dsn, target.app_name
        self._transaction_pooling = target.transaction_pooling
        self._timeout = target.statement_timeout
        self._store = Store(target.schema)
        self._watch = ServerWatch()  # the server this Admin writes to (see _storage.servers)
        self._kept = _Kept()  # touched on the portal's loop only, or once dead

    def close_with(self, owner: object) -> None:
        """Close the kept connections once ``owner`` is collected or the interpreter exits."""
        weakref.finalize(owner, _close_kept, self._kept)

    def close(self) -> None:
        """Close the connections kept between actions (a later action opens new ones)."""
        _close_kept(self._kept)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Conn]:
        """A connection for one action; a driver error becomes a ``DatabaseError``."""
        try:
            async with self._borrow() as conn:
                yield conn
        except psycopg.Error as exc:  # pgsched's own error, one line naming the host
            raise database_error(exc, resolve_dsn(self._dsn)) from exc

    @asynccontextmanager
    async def _borrow(self) -> AsyncIterator[Conn]:
        """Kept connections are reused on the portal's loop only (a coroutine of the
        replica's own loop, such as the retention job, gets its own)."""
        keep = PORTAL.owns_running_loop()
        conn = await self._take_idle() if keep else None
        if conn is None:
            conn = await self._open()
        try:
            yield conn
        except Exception as exc:
            if not_writable(exc):  # a read-only server: never lend this connection again
                await conn.close()
            raise
        finally:
            if keep and self._reusable(conn):
                self._kept.conns.append(conn)
            else:
                await conn.close()

    async def _open(self) -> Conn:
        dsn = require_dsn(resolve_dsn(self._dsn))
        pooling = self._transaction_pooling
        options = connect_options(dsn, self._app_name, transaction_pooling=pooling)
        conn = await BoundedAsyncConnection.connect(self._watch.steer(dsn), **options)
        # An operator's statement may run until the server's statement_timeout ends it.
        conn.answer_timeout = self._timeout.total_seconds() + ANSWER_GRACE_S
        try:
            # A standby, a read-only primary or a demoted one beside the promoted: refused.
            await require_writable(self._store, conn, self._watch)
            if not pooling:
                await self._store.configure_session(conn, self._timeout, self._timeout * 2)
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _take_idle(self) -> Conn | None:
        """A kept connection that still answers, or None."""
        kept = self._kept
        kept.adopt()
        while kept.conns:
            conn = kept.conns.pop()
            try:
                await AsyncConnectionPool.check_connection(conn)
                return conn
            except psycopg.Error:
                await conn.close()
        return None

    def _reusable(self, conn: Conn) -> bool:
        return (
            len(self._kept.conns) < KEEP_IDLE
            and not conn.closed
            and not conn.broken
            and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        )


class _Kept:
    """The idle connections an Admin keeps, and the process they were opened in."""

    def __init__(self) -> None:
        self.conns: list[Conn] = []
        self.pid = os.getpid()

    def adopt(self) -> None:
        """In a forked child, set the parent's sessions aside: never used, never closed
        (closing would end them for the parent), never collected (finalising would too)."""
        if self.pid != os.getpid():
            _FORKED_AWAY.extend(self.conns)
            self.conns.clear()
            self.pid = os.getpid()


def _close_kept(kept: _Kept) -> None:
    """Close ``kept``'s connections on the portal's loop (close(), or the Admin's finaliser
    when it is collected or the interpreter exits)."""

    async def close_all() -> None:
        kept.adopt()
        conns = list(kept.conns)
        kept.conns.clear()
        for conn in conns:
            await conn.close()

    if kept.conns:
        PORTAL.run_soon(close_all(), wait_s=5.0)


class PooledConnections:
    """An AsyncAdmin's pool (at most ``max_connections``), opened on first use on the running
    loop; its connections are checked like an Admin's and given the same timeouts."""

    def __init__(self, target: Target, max_connections: int) -> None:
        self._dsn, self._app_name = target.dsn, target.app_name
        self._transaction_pooling = target.transaction_pooling
        self._timeout, self._max = target.statement_timeout, max_connections
        self._store = Store(target.schema)
        self._pool: WritablePool | None = None

    async def open(self) -> None:
        if self._pool is not None:
            return
        dsn = require_dsn(resolve_dsn(self._dsn))
        try:  # a database that is down: its own error now, not the pool's timeout later
            await first_answer(
                dsn,
                store=self._store,
                app_name=self._app_name,
                transaction_pooling=self._transaction_pooling,
            )
        except psycopg.Error as exc:
            raise database_error(exc, dsn) from exc
        pool = make_pool(
            dsn,
            store=self._store,
            app_name=self._app_name,
            transaction_pooling=self._transaction_pooling,
            min_size=1,
            max_size=self._max,
            timeout=max(5.0, self._timeout.total_seconds()),
            answer_timeout=self._timeout.total_seconds() + ANSWER_GRACE_S,
            session=self._configure,
        )
        await pool.open()
        self._pool = pool

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def _configure(self, conn: Conn) -> None:
        if not self._transaction_pooling:  # no session state through the pooler
            await self._store.configure_session(conn, self._timeout, self._timeout * 2)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Conn]:
        """A connection of the pool (opened if need be); a driver error becomes a
        ``DatabaseError``."""
        await self.open()
        assert self._pool is not None
        try:
            async with pooled(self._pool) as conn:
                yield conn
        except psycopg.Error as exc:  # pgsched's own error, one line naming the host
            raise database_error(exc, resolve_dsn(self._dsn)) from exc
