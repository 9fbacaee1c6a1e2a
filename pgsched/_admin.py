"""Operating pgsched without the jobs' code: status, runs, trigger, pause, cancel, prune."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg.conninfo import conninfo_to_dict

from . import _ops
from ._config import check_job_name
from ._dsn import redact, resolve_dsn
from ._durations import Duration, parse_duration
from ._errors import ConfigError
from ._model import GLOBAL, Scope
from ._store import Conn, Row, Store

_T = TypeVar("_T")

RUN_STATUSES = ("PENDING", "RUNNING", "SUCCESS", "FAILED", "CANCELLED")


class Admin:
    """Operator actions on one database and schema; jobs are known from ``job_state``,
    where every replica records the jobs it runs.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed.
    """

    def __init__(
        self, dsn: str | None = None, schema: str = "pgsched", statement_timeout: Duration = "30s"
    ) -> None:
        if not isinstance(schema, str) or not schema or len(schema) > 63:
            raise ConfigError(f"schema={schema!r} must be a name of 1 to 63 characters")
        self._dsn = dsn
        self.schema = schema
        self.statement_timeout = parse_duration(
            statement_timeout, field="statement_timeout", allow_zero=False
        )

    @property
    def dsn(self) -> str | None:
        return resolve_dsn(self._dsn)

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migration versions applied now.

        Safe when several replicas run it at once (an advisory lock serialises them)."""
        return self._call(lambda conn, store: store.migrate(conn))

    def status(self) -> list[Row]:
        """Per job: schedule, paused, last plan and status, last success, running, stale,
        failed (no retry left) and pending counts."""
        return self._call(lambda conn, store: store.job_summary(conn))

    def runs(self, job: str | None = None, status: str | None = None, limit: int = 20) -> list[Row]:
        """The most recent executions, newest first."""
        if status is not None and status.upper() not in RUN_STATUSES:
            raise ConfigError(f"status={status!r} is not one of {', '.join(RUN_STATUSES)}")
        if limit < 1:
            raise ConfigError(f"limit={limit!r} must be at least 1")
        if job is not None:
            check_job_name(job)
        state = None if status is None else status.upper()
        return self._call(lambda c, s: s.list_runs(c, job=job, status=state, limit=limit))

    def trigger(self, job: str, scope: Scope = GLOBAL, at: datetime | None = None) -> UUID:
        """Insert a PENDING manual run of a registered job; returns its execution id."""
        check_job_name(job)
        when = None if at is None else aware(at, "at")

        async def go(conn: Conn, store: Store) -> UUID:
            await _ops.ensure_known(conn, store, job)
            row = await _ops.trigger(conn, store, job, scope, when, max_attempts=1)
            return UUID(str(row["id"]))

        return self._call(go)

    def pause(self, job: str) -> None:
        """Stop planning and claiming ``job`` on every replica within one tick."""
        self._set_paused(job, True)

    def resume(self, job: str) -> None:
        """Undo :meth:`pause`."""
        self._set_paused(job, False)

    def _set_paused(self, job: str, paused: bool) -> None:
        check_job_name(job)

        async def go(conn: Conn, store: Store) -> None:
            await _ops.ensure_known(conn, store, job)
            await _ops.set_paused(conn, store, job, paused)

        self._call(go)

    def cancel(self, execution_id: UUID | str) -> None:
        """Cancel a PENDING execution; raises if it does not exist or is not PENDING."""
        try:
            ident = UUID(str(execution_id))
        except ValueError:
            raise ConfigError(f"execution id {execution_id!r} is not a UUID") from None
        self._call(lambda conn, store: _ops.cancel(conn, store, ident))

    def prune(self, older_than: Duration) -> int:
        """Delete finished rows older than ``older_than`` in small batches; returns the count.

        Each scope's newest plan is kept, since every_plan catch-up starts after it.
        """
        age = parse_duration(older_than, field="older_than", allow_zero=False)
        return self._call(lambda conn, store: _ops.prune(conn, store, age))

    # -- plumbing -------------------------------------------------------------------------

    def _app_name(self) -> str:
        """``application_name`` of pgsched's connections, so operators can find them."""
        return "pgsched admin"

    def _call(self, fn: Callable[[Conn, Store], Coroutine[Any, Any, _T]]) -> _T:
        return blocking(self._with_conn(fn))

    def _require_dsn(self) -> str:
        """The DSN, checked for syntax (libpq's message, password redacted, if it is bad)."""
        dsn = self.dsn
        if not dsn:
            raise ConfigError(
                "no database configured: pass dsn= (--dsn), or set PGSCHED_DSN or DATABASE_URL"
            )
        try:
            conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"invalid DSN: {redact(str(exc))}") from None
        return dsn

    async def _with_conn(self, fn: Callable[[Conn, Store], Coroutine[Any, Any, _T]]) -> _T:
        async with await psycopg.AsyncConnection.connect(
            self._require_dsn(), autocommit=True, application_name=self._app_name()
        ) as conn:
            store = Store(self.schema)
            await store.configure_session(conn, self.statement_timeout, self.statement_timeout * 2)
            return await fn(conn, store)


def parse_time(text: str, name: str) -> datetime:
    """An ISO 8601 instant such as ``2027-03-28T09:00:00+02:00``; without an offset, UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{name}={text!r} is not an ISO 8601 time (e.g. 2027-03-28T09:00:00Z)"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def jsonable(row: Row) -> dict[str, Any]:
    """A database row as JSON-ready values (ISO times, UUIDs as text)."""
    return {
        key: value.isoformat()
        if isinstance(value, datetime)
        else str(value)
        if isinstance(value, UUID)
        else value
        for key, value in row.items()
    }


def aware(value: datetime, name: str) -> datetime:
    """``value`` in UTC; a naive datetime is refused."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ConfigError(f"{name}={value!r} must be a timezone-aware datetime")
    return value.astimezone(UTC)


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
