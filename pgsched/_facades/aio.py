"""``AsyncAdmin``: the operations core for asyncio code, over a small pool it owns. Every
operation of ``Admin`` is a coroutine here (inherited from the core), and nothing blocks the
running loop.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import TracebackType

from .._jobs.spec import JobSpec
from .._operations.audit import Actor
from .._operations.connectors import PooledConnections, Target
from .._operations.core import Operations, no_jobs
from .._times import Duration


class AsyncAdmin(Operations):
    """Operator actions as coroutines: ``status``, ``replicas``, ``runs``, ``run``,
    ``trigger``, ``cancel``, ``pause``, ``resume``, ``forget``, ``backfill``, ``prune``,
    ``migrate`` (and the schedule operations of dynamic jobs).

    Use it as ``async with pgsched.AsyncAdmin(dsn) as admin:``; the pool (at most
    ``max_connections``) opens on entry, or on first use, and closes on exit or
    :meth:`aclose`. It belongs to the event loop it was opened on. The DSN is ``dsn``, else
    ``PGSCHED_DSN``, else ``DATABASE_URL``. Its actions are recorded in the action log as
    ``actor``'s (default ``python:user@host``), surface ``async_admin``.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgsched",
        statement_timeout: Duration = "30s",
        *,
        max_connections: int = 4,
        jobs: Callable[[], Mapping[str, JobSpec]] = no_jobs,
        app_name: str = "pgsched admin",
        transaction_pooling: bool | None = None,
        actor: str | None = None,
    ) -> None:
        target = Target.parse(dsn, schema, statement_timeout, app_name, transaction_pooling)
        self.transaction_pooling = target.transaction_pooling
        self._connections = PooledConnections(target, max_connections)
        super().__init__(
            target.schema, self._connections.connect, jobs, actor=Actor.python("async_admin", actor)
        )

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
        await self._connections.open()

    async def aclose(self) -> None:
        """Close the pool; a later operation opens a new one."""
        await self._connections.aclose()
