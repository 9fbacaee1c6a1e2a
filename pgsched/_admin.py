"""``Admin``: the operations core (``_ops``) for synchronous callers. Translates and calls,
nothing more: validation and SQL live in the core. Operations run on the process's portal
loop (``_portal``), where the Admin keeps a few idle connections between calls.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import weakref
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ._config import JobSpec
from ._dsn import require_dsn, resolve_dsn, resolve_transaction_pooling
from ._errors import ConfigError
from ._model import GLOBAL, Scope
from ._operations.core import Operations, _no_jobs
from ._planning.schedules import Schedule, ScheduleSpec
from ._portal import PORTAL
from ._storage.connection import (
    connect_options,
    database_error,
    not_writable,
    require_writable,
)
from ._storage.servers import ServerWatch
from ._storage.store import Conn, Store
from ._times import Duration, parse_duration
from ._views import Execution, JobStatus

_T = TypeVar("_T")
KEEP_IDLE = 4  # connections an Admin keeps open between actions
_FORKED_AWAY: list[Conn] = []


class ScheduleMethods:
    """The schedule operations of dynamic jobs (docs/schedules.md) for sync callers: on
    ``Admin`` and on ``Scheduler``. Each validates everything before it writes and writes
    nothing when anything is invalid (``ConfigError`` naming the job, the scope, the field,
    the value)."""

    def _admin(self) -> Admin:
        raise NotImplementedError

    def put_schedule(
        self,
        job: str,
        scope: Scope,
        *,
        every: Duration | None = None,
        cron: str | None = None,
        timezone: str = "UTC",
        payload: dict[str, Any] | None = None,
        starts_at: datetime | None = None,
        ends_at: datetime | None = None,
        paused: bool = False,
    ) -> Schedule:
        """Create or replace the schedule of ``scope`` (exactly one of ``every`` / ``cron``);
        its first plan is strictly after the put. Returns it as stored."""
        admin = self._admin()
        return admin._call(
            admin._ops.put_schedule(
                job,
                scope,
                every=every,
                cron=cron,
                timezone=timezone,
                payload=payload,
                starts_at=starts_at,
                ends_at=ends_at,
                paused=paused,
            )
        )

    def put_schedules(self, job: str, specs: Iterable[ScheduleSpec]) -> int:
        """Create or replace many schedules in one transaction, all or nothing; returns how
        many were written (one identical to the stored schedule is not)."""
        admin = self._admin()
        return admin._call(admin._ops.put_schedules(job, specs))

    def get_schedule(self, job: str, scope: Scope) -> Schedule | None:
        """The stored schedule of ``scope``, or None."""
        admin = self._admin()
        return admin._call(admin._ops.get_schedule(job, scope))

    def list_schedules(
        self, job: str, *, after: Scope | None = None, limit: int = 100
    ) -> list[Schedule]:
        """Up to ``limit`` schedules ordered by scope kind then id, after the scope ``after``."""
        admin = self._admin()
        return admin._call(admin._ops.list_schedules(job, after=after, limit=limit))

    def delete_schedule(self, job: str, scope: Scope) -> bool:
        """Delete the schedule (its runs stay); False when there was none."""
        admin = self._admin()
        return admin._call(admin._ops.delete_schedule(job, scope))

    def pause_schedule(self, job: str, scope: Scope) -> None:
        """No plan of the schedule is claimed until it is resumed (``NotFoundError`` if none)."""
        admin = self._admin()
        admin._call(admin._ops.pause_schedule(job, scope))

    def resume_schedule(self, job: str, scope: Scope) -> None:
        """Resume the schedule; the job's catch-up mode decides which missed plans run."""
        admin = self._admin()
        admin._call(admin._ops.resume_schedule(job, scope))


class Admin(ScheduleMethods):
    """Operator actions on one database and schema, for code that is not ``async``.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed.
    Each action borrows a connection (statements bounded by ``statement_timeout``): an idle
    one this Admin kept from an earlier action, checked first, or a new one; up to
    ``KEEP_IDLE`` stay open between actions, until :meth:`close` or the interpreter exits.
    Safe to share between threads. The same actions as coroutines: :class:`AsyncAdmin`.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgsched",
        statement_timeout: Duration = "30s",
        *,
        jobs: Callable[[], Mapping[str, JobSpec]] = _no_jobs,
        app_name: str = "pgsched admin",
        transaction_pooling: bool | None = None,
    ) -> None:
        self._dsn = dsn
        self.schema = check_schema(schema)
        self.statement_timeout = parse_duration(
            statement_timeout, field="statement_timeout", allow_zero=False
        )
        self._app_name = app_name
        self.transaction_pooling = resolve_transaction_pooling(transaction_pooling)
        self._store = Store(self.schema)
        self._watch = ServerWatch()  # the server this Admin writes to (see _servers)
        self._ops = Operations(self._store, self._connect, jobs)
        self._kept = _Kept()  # touched on the portal's loop only, or once dead
        weakref.finalize(self, _close_kept, self._kept)  # collected, or the interpreter exits

    @property
    def dsn(self) -> str | None:
        return resolve_dsn(self._dsn)

    def _connect_info(self) -> str:
        """The DSN to connect with (checked; a :class:`ConfigError` when there is none)."""
        return require_dsn(self.dsn)

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Conn]:
        """A connection for one action: kept ones are reused on the portal's loop only (a
        coroutine of the replica's own loop, such as the retention job, gets its own)."""
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
        dsn = self._connect_info()
        options = connect_options(dsn, self._app_name, transaction_pooling=self.transaction_pooling)
        conn = await psycopg.AsyncConnection.connect(self._watch.steer(dsn), **options)
        try:
            # A standby, a read-only primary or a demoted one beside the promoted: refused.
            await require_writable(self._store, conn, self._watch)
            if not self.transaction_pooling:
                timeout = self.statement_timeout
                await self._store.configure_session(conn, timeout, timeout * 2)
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

    def close(self) -> None:
        """Close the connections kept between actions (a later action opens new ones)."""
        _close_kept(self._kept)

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        try:
            return PORTAL.call(coro)
        except psycopg.Error as exc:  # pgsched's own error, one line naming the host
            raise database_error(exc, self.dsn) from exc

    def _admin(self) -> Admin:
        return self

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migration versions applied now (safe when
        several replicas run it at once)."""
        return self._call(self._ops.migrate())

    def status(self) -> list[JobStatus]:
        """Per job: schedule, paused, last plan and status, last success, and its running,
        stale, failed (no retry left) and pending counts."""
        return self._call(self._ops.status())

    def runs(
        self, job: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[Execution]:
        """The most recent executions, newest first (``limit`` between 1 and 1000)."""
        return self._call(self._ops.runs(job, status, limit))

    def trigger(self, job: str, scope: Scope = GLOBAL, at: datetime | None = None) -> UUID:
        """Queue a manual run of ``job`` now (or at ``at``) and wake every replica; returns its
        execution id (the already PENDING one, if there is one for the job and scope)."""
        return self._call(self._ops.trigger(job, scope, at)).id

    def cancel(self, execution_id: UUID | str) -> None:
        """Cancel a PENDING execution."""
        self._call(self._ops.cancel(execution_id))

    def pause(self, job: str) -> None:
        """Stop planning and claiming ``job`` on every replica within one tick."""
        self._call(self._ops.pause(job))

    def resume(self, job: str) -> None:
        """Undo :meth:`pause`."""
        self._call(self._ops.resume(job))

    def backfill(
        self, job: str, start: datetime, end: datetime, scopes: Iterable[Scope] | None = None
    ) -> int:
        """Queue every plan of ``job`` in ``[start, end]`` (a job registered in code)."""
        return self._call(self._ops.backfill(job, start, end, scopes))

    def prune(self, older_than: Duration) -> int:
        """Delete finished runs older than ``older_than``; each scope's newest plan stays."""
        return self._call(self._ops.prune(older_than))


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


def check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not schema or len(schema) > 63:
        raise ConfigError(f"schema={schema!r} must be a name of 1 to 63 characters")
    return schema


def blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion from sync code, even if this thread already runs a loop."""
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is None:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
