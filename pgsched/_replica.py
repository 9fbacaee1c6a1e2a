"""One running replica: the engine (``_engine.runtime``) and its HTTP server on one pool,
started and shut down together. Owns their lifecycle on the running loop; decides nothing
about jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from ._engine.runtime import Runtime
from ._errors import describe_error
from ._operations.core import Operations
from ._storage.answering import ANSWER_GRACE_S
from ._storage.connection import (
    Backoff,
    NotConnected,
    database_error,
    first_answer,
    pool_hosts,
    pooled,
    unavailable,
)
from ._storage.statements import Conn
from ._storage.store import Store
from ._structures import TickReport


class Replica:
    """The engine and HTTP server of one ``Scheduler`` while it runs."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self._pool, self._jobs, self._settings = runtime.pool, runtime.jobs, runtime.settings
        self._metrics = runtime.recorder.metrics
        self._loop = asyncio.get_running_loop()  # made on the loop it runs on
        self._stopping = asyncio.Event()
        # Why the database has not been reached yet (None once it answered): until then the
        # pool stays closed and HTTP (/readyz, the API) says why.
        self.unreached: str | None = "connecting to the database"
        self._retry_in = 0.0  # the delay before the next attempt to reach the database

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Conn]:
        # An operator's statement may run until the server's statement_timeout ends it.
        if self.unreached is not None:
            raise NotConnected(self.unreached)
        bound = self._settings.statement_timeout.total_seconds() + ANSWER_GRACE_S
        async with pooled(self._pool, bound) as conn:  # a read-only server's: dropped
            yield conn

    def operations(self) -> Operations:
        """The operations core on this replica's pool (for its HTTP API)."""
        return Operations(self._settings.schema, self._connection, self._jobs)

    async def once(self) -> TickReport | None:
        """One tick, its handlers run to completion and their outcomes written; None when the
        tick failed."""
        runtime = self.runtime
        try:
            await self._first_answer()
        except Exception as exc:
            raise database_error(exc, self._settings.conninfo) from exc
        await self._pool.open()
        self.unreached = None
        runtime.start_background(listen=False)
        ok = await runtime.tick()
        # A tick that failed for one job may have claimed another's plans: they run too.
        await runtime.wait_idle()
        await runtime.shutdown(timedelta(0))
        return runtime.report if ok else None

    async def serve(
        self, http_port: int | None, http_host: str, on_listening: Callable[[int], None]
    ) -> None:
        """Tick until :meth:`stop` (or cancellation), then shut down within the grace."""
        runtime, log = self.runtime, self.runtime.recorder.log
        server = None
        ops = self.operations()
        self._metrics.cluster.attach(
            lambda: asyncio.wait_for(ops.status(), 5.0),
            self._loop,
            lambda exc: log.warning("metrics_db_error", error=describe_error(exc)),
        )
        try:
            backoff = Backoff()
            # The first attempt before HTTP listens: with the database up, the API answers
            # from its first request; with it down, /readyz says so while we retry.
            first = await self._attempt(backoff)
            if http_port is not None:
                server = await self._start_http(http_host, http_port, on_listening)
            if not first and not await self.connect(backoff):
                log.info("scheduler_stopped", **vars(runtime.report))
                return
            log.info(
                "scheduler_started",
                jobs=sorted(self._jobs()),
                schema=self._settings.schema,
                max_concurrency=runtime.leases.max_concurrency,
                tick_interval_s=runtime.tick_interval,
            )
            runtime.start_background(listen=not self._settings.transaction_pooling)
            cancelled = await _until_cancelled(runtime.run_forever())
            await runtime.shutdown(self._settings.shutdown_grace)
            log.info("scheduler_stopped", **vars(runtime.report))
            if cancelled:
                raise asyncio.CancelledError
        finally:
            self._metrics.cluster.detach()
            if server is not None:
                await server.stop()

    async def connect(self, backoff: Backoff) -> bool:
        """Retry until the database answers (0.5 s doubling to 5 s between attempts, one log
        line each), the pool then open; False when stopped first."""
        while not self._stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._retry_in)
            if not self._stopping.is_set() and await self._attempt(backoff):
                return True
        return False

    async def _first_answer(self) -> None:
        """Wait for the database's first answer on a connection of the pool's settings."""
        settings = self._settings
        await first_answer(
            settings.conninfo,
            store=Store(settings.schema),
            app_name=settings.app_name,
            transaction_pooling=settings.transaction_pooling,
        )

    async def _attempt(self, backoff: Backoff) -> bool:
        """One attempt to reach the database: True (the pool opened) when it answered; else
        one ``database_unavailable`` line. A pool opened on a database that is down would
        log its own retries and time out every borrow."""
        settings, log = self._settings, self.runtime.recorder.log
        where = pool_hosts(self._pool)
        try:
            await self._first_answer()
        except Exception as exc:
            if not unavailable(exc):
                raise database_error(exc, settings.conninfo) from exc
            self.unreached = f"database unavailable on {where}: {describe_error(exc)}"
            delay = backoff.delay()
            log.warning(
                "database_unavailable",
                host=where,
                attempt=backoff.failures,
                error=describe_error(exc),
                retry_in_s=delay,
            )
            self._retry_in = delay
            return False
        if backoff.failures:
            log.info("database_available", host=where, attempts=backoff.failures + 1)
        await self._pool.open()
        self.unreached = None
        return True

    async def _start_http(self, host: str, port: int, on_listening: Callable[[int], None]) -> Any:
        from ._facades.http.server import HttpServer

        server = HttpServer(
            ops=self.operations(),
            health=self.runtime,
            metrics=self._metrics,
            log=self.runtime.recorder.log,
        )
        bound = await server.start(host, port)
        on_listening(bound)
        url = f"http://{host}:{bound}/"
        self.runtime.registration.http_address = url
        self.runtime.recorder.log.info(
            "http_listening", status_page=url, metrics=f"{url}metrics", host=host, port=bound
        )
        return server

    def stop(self) -> None:
        self._stopping.set()
        self.runtime.request_stop()

    def stop_threadsafe(self) -> None:
        with contextlib.suppress(RuntimeError):  # the loop has closed: it has stopped anyway
            self._loop.call_soon_threadsafe(self.stop)


async def _until_cancelled(work: Any) -> bool:
    """Await ``work``; True when the awaiting task was cancelled meanwhile (the caller then
    shuts down gracefully before letting the cancellation through)."""
    try:
        await work
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()
        return True
    return False
