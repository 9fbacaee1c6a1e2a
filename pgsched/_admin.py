"""``Admin``: the operations core (``_ops``) for synchronous callers, one short connection per
action. Translates and calls, nothing more: validation and SQL live in the core.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import psycopg

from ._config import JobSpec
from ._dsn import require_dsn, resolve_dsn, resolve_transaction_pooling
from ._durations import Duration, parse_duration
from ._errors import ConfigError
from ._model import GLOBAL, Scope
from ._ops import Operations, _no_jobs
from ._store import Conn, Store
from ._views import Execution, JobStatus

_T = TypeVar("_T")


class Admin:
    """Operator actions on one database and schema, for code that is not ``async``.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed.
    Each action opens one connection (bounded by ``statement_timeout``) and closes it. The
    same actions as coroutines: :class:`AsyncAdmin`.
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
        self._prepare_threshold = None if self.transaction_pooling else 5
        self._store = Store(self.schema)
        self._ops = Operations(self._store, self._connect, jobs)

    @property
    def dsn(self) -> str | None:
        return resolve_dsn(self._dsn)

    def _connect_info(self) -> str:
        """The DSN to connect with (checked; a :class:`ConfigError` when there is none)."""
        return require_dsn(self.dsn)

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[Conn]:
        async with await psycopg.AsyncConnection.connect(
            self._connect_info(),
            autocommit=True,
            application_name=self._app_name,
            prepare_threshold=self._prepare_threshold,
        ) as conn:
            if not self.transaction_pooling:
                timeout = self.statement_timeout
                await self._store.configure_session(conn, timeout, timeout * 2)
            yield conn

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return blocking(coro)

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
