"""How pgsched connects, and what a database error means. Owns the one place that builds
connection settings (libpq's connect timeout and TCP keepalives by default), the pools'
check and configure hooks that keep connections to a server that cannot take writes out of
use (a standby, or a primary made read-only by a switchover), the split between "database
unavailable, try again" and an error of the statement itself, and the retry backoff.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.base import AttemptWithBackoff

from .._errors import DatabaseError, describe_error
from .._records import Row, Server
from .answering import BoundedAsyncConnection, NoAnswer, _Answering
from .servers import ServerWatch
from .statements import Conn
from .store import Store

# A server that vanishes without closing its sockets (a crashed host, a partition) is noticed
# within keepalives_idle + keepalives_interval * keepalives_count = 11 s on an idle
# connection, and within tcp_user_timeout (10 s) on one whose statement or result is not
# acknowledged: together a bound on every statement that waits on a dead host. A connect to
# it gives up after connect_timeout. A DSN's own values win.
LIBPQ_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
# libpq reads these from the environment when the DSN does not set them.
_ENVIRONMENT = {"connect_timeout": "PGCONNECT_TIMEOUT"}
# The longest wait between two attempts to reconnect (a pool's, a tick's after it failed).
RECONNECT_EVERY_S = 1.0


class DatabaseNotWritable(psycopg.OperationalError):
    """The server reached cannot take writes (in recovery, or read-only)."""


def connect_options(conninfo: str, app_name: str, *, transaction_pooling: bool) -> dict[str, Any]:
    """Keyword arguments of every connection pgsched opens to ``conninfo`` (pool, transactional
    runs, Admin): autocommit, its name, prepared statements unless a transaction-pooling
    PgBouncer is in between, and :data:`LIBPQ_DEFAULTS` for what the DSN leaves unset."""
    given = conninfo_to_dict(conninfo)
    options: dict[str, Any] = {
        key: value
        for key, value in LIBPQ_DEFAULTS.items()
        if key not in given and not os.environ.get(_ENVIRONMENT.get(key, ""), "")
    }
    options.update(
        autocommit=True,
        application_name=app_name,
        prepare_threshold=None if transaction_pooling else 5,
    )
    return options


def hosts(conninfo: object) -> str:
    """The ``host:port`` list of ``conninfo`` (a pool's may be a callable), for logs (never
    its password)."""
    if not isinstance(conninfo, str):
        return "?"
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        return "?"
    names = str(params.get("host") or params.get("hostaddr") or "default").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(names)
    return ",".join(f"{h}:{p}" if p else h for h, p in zip(names, ports, strict=False))


def database_error(exc: BaseException, conninfo: str | None) -> DatabaseError:
    """``exc`` (a driver or pool error) as pgsched's own: one line naming the hosts of
    ``conninfo``, the password redacted."""
    where = hosts(conninfo) if conninfo else "the database"
    return DatabaseError(f"database error on {where}: {' '.join(describe_error(exc).split())}")


def unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the database cannot serve us right now (down, restarting,
    unreachable, read-only, a pool without a connection to lend), so the same statement may
    succeed later; False when the statement itself is at fault."""
    if isinstance(exc, psycopg.Error) and (exc.sqlstate or "").startswith("54"):
        return False  # program limit exceeded: this statement would fail every time
    return isinstance(
        exc,
        psycopg.OperationalError  # also AdminShutdown, PoolTimeout, DatabaseNotWritable
        | psycopg.InterfaceError
        | psycopg.errors.ReadOnlySqlTransaction
        | TimeoutError,
    )


def not_writable(exc: BaseException) -> bool:
    """True when ``exc`` says the server reached cannot take writes: its connection must not
    be used again (it would fail the same way until it is replaced)."""
    return isinstance(exc, psycopg.errors.ReadOnlySqlTransaction | DatabaseNotWritable)


def met_server(state: Row, conn: psycopg.BaseConnection[Any]) -> tuple[str | None, Server]:
    """From ``state`` (the ``server_state`` row read through ``conn``): why the server cannot
    take writes (None when it can), and which server it is."""
    server = Server(
        state["system_identifier"],
        int(state["timeline"] or 0),
        f"{conn.info.host}:{conn.info.port}",
    )
    if state["in_recovery"]:
        return "the server is in recovery (a standby)", server
    if state["read_only"]:
        return "the server is read-only (transaction_read_only is on)", server
    return None, server


async def require_writable(store: Store, conn: Conn, watch: ServerWatch | None = None) -> None:
    """Raise :class:`DatabaseNotWritable` (closing ``conn``) when its server cannot take
    writes, or (``watch``) is not the server connections must reach: a pool's ``check`` and
    ``configure`` hook, so such a connection is discarded and a new one sought (a multi-host
    DSN with ``target_session_attrs=read-write`` finds the new primary; the watch steers it
    past a writable host it refused)."""
    why, server = met_server(await store.server_state(conn), conn)
    if why is None and watch is not None:
        why = await watch.admit(server, conn)
    if why is not None:
        await conn.close()
        raise DatabaseNotWritable(f"{why}: {server.address}")


def require_writable_sync(store: Store, conn: psycopg.Connection[Any], watch: ServerWatch) -> None:
    """:func:`require_writable` for a sync connection (in a worker thread): the server is
    checked against ``watch``, never adopted (the replica's pool adopts a new one)."""
    why, server = met_server(store.server_state_sync(conn), conn)
    if why is None:
        why = watch.refusal(server)
    if why is not None:
        raise DatabaseNotWritable(f"{why}: {server.address}")


async def synchronous_protection(store: Store, conn: Conn) -> tuple[str, str] | None:
    """With synchronous claims: (log event, why) when the server reached cannot make a commit
    wait for a synchronous standby as asked, None when it can (or this role may not tell)."""
    row = await store.synchronous_standbys(conn)
    if not str(row["names"]).strip():
        why = (
            "synchronous_standby_names is empty: commits wait for no standby, so claims and"
            " terminal writes are not protected against failover"
        )
        return "synchronous_claims_unprotected", why
    if not (row["synchronous"] or row["hidden"]):
        why = "no synchronous standby is connected: claims wait until one is"
        return "synchronous_standby_missing", why
    return None


class NotConnected(psycopg.OperationalError):
    """The replica has not reached its database yet (it is still waiting for an answer)."""


FIRST_ANSWER_TIMEOUT_S = 5.0  # how long one start-up attempt waits for the server's answer


async def first_answer(
    conninfo: str, *, store: Store, app_name: str, transaction_pooling: bool
) -> None:
    """Connect once to ``conninfo`` and check that its server takes writes; the driver's
    error when it cannot. A replica waits for this before it opens its pool, so a database
    that is down costs one line per attempt, not the pool's retries and timeouts."""
    options = connect_options(conninfo, app_name, transaction_pooling=transaction_pooling)
    conn = await BoundedAsyncConnection.connect(conninfo, **options)
    try:
        conn.answer_timeout = FIRST_ANSWER_TIMEOUT_S
        await require_writable(store, conn)
    finally:
        await conn.close()


class _ReconnectAttempt(AttemptWithBackoff):
    """psycopg_pool's reconnect attempts, at most :data:`RECONNECT_EVERY_S` apart: its delay
    doubles without bound (1, 2, 4, 8 ... s), so after a long outage work waited for the next
    attempt, seconds after the server answered again."""

    def update_delay(self, now: float) -> None:
        super().update_delay(now)
        self.delay = min(self.delay, RECONNECT_EVERY_S)


class WritablePool(AsyncConnectionPool[Conn]):
    """A pool that lends only connections to a server taking writes and, through ``watch``,
    only to the server its owner has switched to (see :func:`make_pool`); ``refused`` says
    why the last connection it checked was refused, None once one passes. It reconnects at
    most a second apart however long the server was away."""

    refused: str | None = None
    watch: ServerWatch
    dsn: str  # the DSN as configured (``conninfo`` is the watch's steering of it)
    answer_timeout: float | None = None  # its connections' bound unless a borrow sets one

    async def _add_connection(
        self, attempt: AttemptWithBackoff | None, growing: bool = False
    ) -> None:
        attempt = attempt or _ReconnectAttempt(timeout=self.reconnect_timeout)
        await super()._add_connection(attempt, growing)


def pool_hosts(pool: AsyncConnectionPool[Any]) -> str:
    """The ``host:port`` list of ``pool``'s DSN, for logs."""
    return hosts(pool.dsn if isinstance(pool, WritablePool) else pool.conninfo)


def _failed(pool: AsyncConnectionPool[Any], conn: Conn, exc: BaseException) -> None:
    """Note on ``pool`` what ``exc`` says of ``conn``'s server: read-only (refused), or silent
    (its host tried last by new connections for a while)."""
    if not isinstance(pool, WritablePool):
        return
    if not_writable(exc):
        pool.refused = describe_error(exc)
    if isinstance(conn, _Answering) and conn.silent is not None:
        pool.watch.avoid(conn.silent)


@asynccontextmanager
async def pooled(
    pool: AsyncConnectionPool[Any], answer_timeout: float | None = None
) -> AsyncIterator[Conn]:
    """A connection of ``pool``, its waits bounded by ``answer_timeout`` (else the pool's
    bound); one that met a read-only server is closed on the way back, so the pool replaces
    it instead of lending it again."""
    async with pool.connection() as conn:
        bounded = isinstance(conn, _Answering) and answer_timeout is not None
        if bounded:
            conn.answer_timeout = answer_timeout
        try:
            yield conn
        except Exception as exc:
            _failed(pool, conn, exc)
            if not_writable(exc) and not conn.closed:
                await conn.close()
            raise
        finally:
            if bounded:
                conn.answer_timeout = getattr(pool, "answer_timeout", None)


def make_pool(
    conninfo: str,
    *,
    store: Store,
    app_name: str,
    transaction_pooling: bool,
    min_size: int,
    max_size: int,
    timeout: float,
    answer_timeout: float,
    session: Callable[[Conn], Awaitable[None]] | None = None,
    watch: ServerWatch | None = None,
) -> WritablePool:
    """A pool (not yet open) whose connections reach a writable server, the one ``watch``
    (a new one by default) has switched to: checked when made and whenever lent (the check
    replaces psycopg_pool's own round trip); ``session`` configures each new one; every
    wait for the server is bounded by ``answer_timeout`` unless a borrow sets another."""
    watch = watch if watch is not None else ServerWatch()

    async def check(conn: Conn, *, new: bool = False) -> None:
        """A lent connection (``new``: one just made) may be used: its server takes writes
        and is the watch's. A pooled one to an avoided host is dropped unused; a new one
        reached that host only after the others, steered first, would not do."""
        address = f"{conn.info.host}:{conn.info.port}"
        if not new and watch.gives_way(address, conninfo):  # no round trip to a silent host
            await conn.close()
            raise NoAnswer(f"{address} is avoided (silent or refused): connection dropped")
        try:
            await require_writable(store, conn, watch)
        except Exception as exc:
            _failed(pool, conn, exc)
            raise
        pool.refused = None
        if new:
            watch.answered(address)

    async def configure(conn: Conn) -> None:
        if isinstance(conn, _Answering):
            conn.answer_timeout = answer_timeout
        await check(conn, new=True)
        if session is not None:
            await session(conn)

    async def steered() -> str:
        return watch.steer(conninfo)

    pool = WritablePool(
        steered,
        connection_class=BoundedAsyncConnection,
        min_size=min_size,
        max_size=max_size,
        open=False,
        timeout=timeout,
        check=check,
        configure=configure,
        kwargs=connect_options(conninfo, app_name, transaction_pooling=transaction_pooling),
    )
    pool.watch, pool.dsn, pool.answer_timeout = watch, conninfo, answer_timeout
    return pool


class Backoff:
    """Delays between retries: ``first`` seconds, doubling up to ``cap``; :meth:`reset` after a
    success."""

    def __init__(self, first: float = 0.5, cap: float = 5.0) -> None:
        self._first, self._cap = first, cap
        self._next = first
        self.failures = 0

    def reset(self) -> None:
        self._next, self.failures = self._first, 0

    def delay(self) -> float:
        """The next delay (and count the failure it follows)."""
        delay, self._next = self._next, min(self._cap, self._next * 2)
        self.failures += 1
        return delay

    async def wait(self) -> None:
        await asyncio.sleep(self.delay())
