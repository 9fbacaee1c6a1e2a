"""The public ``Scheduler``: job registration, the replica's lifecycle (``run``, ``serve``,
``run_once``), and the operator actions on its jobs through the ``Admin`` it has.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from prometheus_client import CollectorRegistry
from psycopg_pool import AsyncConnectionPool

from ._admin import Admin, blocking
from ._aio import AsyncAdmin
from ._config import Handler, JobSpec, Overlap, ScopesFn, build_job
from ._durations import Duration, parse_duration
from ._errors import ConfigError, NotFoundError, PgschedError
from ._metrics import Metrics
from ._model import GLOBAL, Run, Scope, bound_logger
from ._ops import aware
from ._planning import CatchUp, DstRepeated, DstSkipped, Planner
from ._recorder import TickReport
from ._replica import Replica
from ._runtime import Runtime
from ._views import Execution, JobStatus

_F = TypeVar("_F", bound=Handler)
PRUNE_JOB = "pgsched.prune"


class Scheduler:
    """Registers jobs and runs them on this replica, coordinated through PostgreSQL.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed
    (so a command line can still supply it). ``runner_id`` defaults to ``<hostname>-<pid>``.
    ``shutdown_grace`` is how long handlers may finish after SIGTERM, ``stop()`` or the
    cancellation of ``serve()``. ``statement_timeout`` bounds every statement pgsched runs
    (and twice that, any idle transaction). Metrics go to ``registry`` (a fresh
    ``CollectorRegistry`` by default). With ``retention`` set, a built-in job
    ``pgsched.prune`` deletes finished rows older than that every hour. Operator actions on
    the jobs (``trigger``, ``pause``...) go through ``self.admin``; ``self.aio`` offers them
    as coroutines.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgsched",
        runner_id: str | None = None,
        tick_interval: Duration = "1s",
        max_concurrency: int = 8,
        shutdown_grace: Duration = "30s",
        registry: CollectorRegistry | None = None,
        retention: Duration | None = None,
        statement_timeout: Duration = "30s",
    ) -> None:
        if (
            not isinstance(max_concurrency, int)
            or isinstance(max_concurrency, bool)
            or max_concurrency < 1
        ):
            raise ConfigError(
                f"scheduler: max_concurrency={max_concurrency!r} must be an integer >= 1"
            )
        self.runner_id = runner_id or f"{socket.gethostname()}-{os.getpid()}"
        self.tick_interval = parse_duration(tick_interval, field="tick_interval", allow_zero=False)
        self.shutdown_grace = parse_duration(shutdown_grace, field="shutdown_grace")
        self.statement_timeout = parse_duration(
            statement_timeout, field="statement_timeout", allow_zero=False
        )
        self.max_concurrency = max_concurrency
        self.metrics = Metrics(registry)
        self.http_port: int | None = None  # the bound port while the replica serves HTTP
        self._dsn, self.schema = dsn, schema
        self._jobs: dict[str, JobSpec] = {}
        self._jobs_lock = threading.Lock()
        self._replica: Replica | None = None
        self._stop_requested = threading.Event()
        self._aio: AsyncAdmin | None = None
        self.admin = self._new_admin()
        if retention is not None:
            self._register_retention(parse_duration(retention, field="retention", allow_zero=False))

    @property
    def dsn(self) -> str | None:
        return self.admin.dsn

    def _app_name(self) -> str:
        return f"pgsched {self.runner_id}"[:63]

    def _new_admin(self) -> Admin:
        return Admin(
            self._dsn,
            self.schema,
            self.statement_timeout,
            jobs=lambda: self.jobs,
            app_name=self._app_name(),
        )

    def configure(
        self, *, dsn: str | None = None, schema: str | None = None, runner_id: str | None = None
    ) -> None:
        """Override connection settings (the command line's ``--dsn``, ``--schema``...)."""
        self._dsn = dsn or self._dsn
        self.schema = schema or self.schema
        self.runner_id = runner_id or self.runner_id
        self.admin = self._new_admin()
        self._aio = None

    @property
    def aio(self) -> AsyncAdmin:
        """The operator actions as coroutines, on a small pool of their own opened on first
        use (on the running loop) and closed when ``serve()`` returns."""
        if self._aio is None:
            self._aio = AsyncAdmin(
                self._dsn,
                self.schema,
                self.statement_timeout,
                jobs=lambda: self.jobs,
                app_name=self._app_name(),
            )
        return self._aio

    # -- jobs -------------------------------------------------------------------------------

    def job(
        self,
        *,
        name: str | None = None,
        every: Duration | None = None,
        cron: str | None = None,
        planner: Planner | None = None,
        timezone: str = "UTC",
        scopes: Iterable[Scope] | ScopesFn | None = None,
        catch_up: CatchUp = "latest_only",
        catch_up_window: Duration = "1d",
        max_plans_per_tick: int | None = None,
        max_lateness: Duration | None = None,
        schedule_delay: Duration = 0,
        overlap: Overlap = "forbid",
        jitter: Duration = 0,
        dst_repeated: DstRepeated | None = None,
        dst_skipped: DstSkipped | None = None,
        run_timeout: Duration = "10m",
        stale_timeout: Duration | None = None,
        heartbeat_interval: Duration | None = None,
        allow_stale_reentry: bool = True,
        max_attempts: int = 1,
        retry_backoff: Sequence[Duration] = ("1m",),
        max_running: int | None = None,
        priority: int = 0,
        transactional: bool = False,
    ) -> Callable[[_F], _F]:
        """Decorator form of :meth:`register` (durations: ``timedelta``, seconds or ``"1h30m"``).

        - ``name``: unique job name (default: the function's name).
        - ``every``: fixed cadence; plans are its multiples since the Unix epoch (UTC).
        - ``cron``: 5-field cron read in ``timezone`` (one of ``every``/``cron``/``planner``).
        - ``planner``: an object whose ``plans_between(start, end)`` gives the plans.
        - ``timezone``: IANA zone of ``cron``.
        - ``scopes``: ``Scope`` values, or ``scopes(now)`` each tick (default ``GLOBAL``).
        - ``catch_up``: ``"latest_only"`` (newest due plan) or ``"every_plan"`` (each missed).
        - ``catch_up_window``: ``every_plan`` ignores plans older than this.
        - ``max_plans_per_tick``: plans per scope per tick (required by ``every_plan``).
        - ``max_lateness``: a plan not started within this of its due time is skipped.
        - ``schedule_delay``: a plan is due this long after its plan time.
        - ``overlap``: ``"forbid"`` waits for the scope's running plan; ``"allow"`` does not.
        - ``jitter``: delays each (scope, plan) by a deterministic fraction of this.
        - ``dst_repeated``: ``"first"``, ``"last"``, ``"both"``: fall-back's repeated times.
        - ``dst_skipped``: ``"shift"`` or ``"skip"``: spring-forward's skipped times.
        - ``run_timeout``: a handler running longer is FAILED ``run_timeout``.
        - ``stale_timeout``: an unrenewed lease is stale after this (> ``run_timeout``).
        - ``heartbeat_interval``: how often the lease is renewed (< ``stale_timeout``).
        - ``allow_stale_reentry``: a stale lease is stolen (True) or failed (False).
        - ``max_attempts``: attempts per plan, retries included.
        - ``retry_backoff``: delay before attempt ``i + 2``; the last entry repeats.
        - ``max_running``: cluster-wide cap on the job's running executions.
        - ``priority``: higher claims first when slots are scarce.
        - ``transactional``: ``run.conn`` commits with SUCCESS iff the lease holds."""
        options = {k: v for k, v in locals().items() if k != "self"}
        return lambda handler: self._decorate(handler, options)

    def _decorate(self, handler: _F, options: dict[str, Any]) -> _F:
        self.register(handler, **options)
        return handler

    def register(self, handler: Handler, **options: Any) -> JobSpec:
        """Validate and add a job (also on a running scheduler: it is planned next tick).

        ``options`` are those of :meth:`job`. Raises :class:`ConfigError` naming the job and
        the field for an unknown or invalid option and for a duplicate job name.
        """
        spec = build_job(handler, **options)
        with self._jobs_lock:
            if spec.name in self._jobs:
                raise ConfigError(f"job {spec.name!r}: name is already registered")
            self._jobs[spec.name] = spec
        self.metrics.declare(spec.name, spec.schedule.nominal_interval(datetime.now(UTC)))
        return spec

    def unregister(self, job: str) -> None:
        """Stop planning and claiming ``job`` on this replica; running executions finish."""
        with self._jobs_lock:
            if self._jobs.pop(job, None) is None:
                raise NotFoundError(f"job {job!r} is not registered")

    @property
    def jobs(self) -> dict[str, JobSpec]:
        """A snapshot of the registered jobs by name."""
        with self._jobs_lock:
            return dict(self._jobs)

    def _job(self, name: str) -> JobSpec:
        spec = self.jobs.get(name)
        if spec is None:
            raise NotFoundError(f"job {name!r} is not registered")
        return spec

    def upcoming(self, job: str, after: datetime | None = None, count: int = 5) -> list[datetime]:
        """The next ``count`` plan times of ``job`` strictly after ``after`` (aware UTC)."""
        after = datetime.now(UTC) if after is None else aware(after, "after")
        return self._job(job).schedule.upcoming(after, count)

    def _register_retention(self, older_than: timedelta) -> None:
        async def prune(run: Run) -> int:
            deleted = await self.admin._ops.prune(older_than)
            run.log.info("pruned", deleted=deleted, older_than_s=older_than.total_seconds())
            return deleted

        self.register(prune, name=PRUNE_JOB, every="1h", run_timeout="30m", stale_timeout="35m")

    # -- operator actions on this scheduler's database (see Admin) --------------------------

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migration versions applied now."""
        return self.admin.migrate()

    def status(self) -> list[JobStatus]:
        """Per job: schedule, paused, last plan and status, last success, counts."""
        return self.admin.status()

    def runs(
        self, job: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[Execution]:
        """The most recent executions, newest first."""
        return self.admin.runs(job, status, limit)

    def trigger(self, job: str, scope: Scope = GLOBAL, at: datetime | None = None) -> UUID:
        """Queue a manual run (now, or at ``at``) with the job's ``max_attempts``; while one
        is PENDING for the same job and scope, returns that one."""
        self._job(job)
        return self.admin.trigger(job, scope, at)

    def cancel(self, execution_id: UUID | str) -> None:
        """Cancel a PENDING execution."""
        self.admin.cancel(execution_id)

    def pause(self, job: str) -> None:
        """Stop planning and claiming ``job`` on every replica within one tick."""
        self._job(job)
        self.admin.pause(job)

    def resume(self, job: str) -> None:
        """Undo :meth:`pause`."""
        self._job(job)
        self.admin.resume(job)

    def backfill(
        self, job: str, start: datetime, end: datetime, scopes: Iterable[Scope] | None = None
    ) -> int:
        """Insert PENDING backfill rows for every plan in ``[start, end]`` and scope; existing
        plans are left alone. ``scopes`` defaults to the job's scopes (at ``end``)."""
        self._job(job)
        return self.admin.backfill(job, start, end, scopes)

    def prune(self, older_than: Duration) -> int:
        """Delete finished runs older than ``older_than``; each scope's newest plan stays."""
        return self.admin.prune(older_than)

    # -- running ----------------------------------------------------------------------------

    def run_once(self) -> TickReport:
        """One full tick: plan, claim, run the claimed handlers to completion, write rows."""
        return blocking(self._run_once())

    async def _run_once(self) -> TickReport:
        async with self._pool() as pool:
            replica = self._new_replica(pool)
            report = await replica.once()
        if report is None:
            raise PgschedError("the tick failed; see the tick_error log event")
        return report

    def run(self, http_port: int | None = None, http_host: str = "127.0.0.1") -> None:
        """Run the replica until SIGTERM/SIGINT or :meth:`stop`, then shut down gracefully
        (the blocking form of :meth:`serve`, with signal handlers when on the main thread)."""
        asyncio.run(self._run_with_signals(http_port, http_host))

    async def _run_with_signals(self, http_port: int | None, http_host: str) -> None:
        loop = asyncio.get_running_loop()
        on_main = threading.current_thread() is threading.main_thread()
        signals = (signal.SIGTERM, signal.SIGINT) if on_main else ()
        for sig in signals:
            loop.add_signal_handler(sig, self._on_signal, sig)
        try:
            await self.serve(http_port, http_host)
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        bound_logger(runner_id=self.runner_id).info("shutdown_requested", signal=sig.name)
        self.stop()

    async def serve(self, http_port: int | None = None, http_host: str = "127.0.0.1") -> None:
        """Run the replica on the running event loop (a FastAPI/Starlette lifespan, an aiohttp
        app) until :meth:`stop` or the cancellation of the awaiting task; either ends it as
        SIGTERM does: stop claiming, let handlers finish within ``shutdown_grace``, fail the
        rest retryably. Installs no signal handlers. With ``http_port`` (0 picks a free one,
        kept in ``self.http_port``) it serves ``/metrics``, ``/healthz``, ``/readyz``, ``/``
        and ``/api/`` on ``http_host``."""
        try:
            async with self._pool() as pool:
                replica = self._new_replica(pool)
                self._replica = replica
                if self._stop_requested.is_set():
                    replica.stop()
                await replica.serve(http_port, http_host, self._on_listening)
        finally:
            self._replica = None
            self.http_port = None
            self._stop_requested.clear()  # a stop() before serve() began counted for it
            aio, self._aio = self._aio, None
            if aio is not None:
                await aio.aclose()

    @property
    def _runtime(self) -> Runtime | None:
        """The running engine (for tests and diagnostics), None when not running."""
        replica = self._replica
        return replica.runtime if replica is not None else None

    def _on_listening(self, port: int) -> None:
        self.http_port = port

    def stop(self) -> None:
        """Ask a running :meth:`run` or :meth:`serve` to shut down (thread-safe)."""
        self._stop_requested.set()
        replica = self._replica
        if replica is not None:
            replica.stop_threadsafe()

    def _new_replica(self, pool: AsyncConnectionPool[Any]) -> Replica:
        return Replica(
            jobs=lambda: self.jobs,
            pool=pool,
            schema=self.schema,
            runner_id=self.runner_id,
            max_concurrency=self.max_concurrency,
            tick_interval=self.tick_interval,
            shutdown_grace=self.shutdown_grace,
            metrics=self.metrics,
            conninfo=self.admin._connect_info(),
            app_name=self._app_name(),
        )

    def _pool(self) -> AsyncConnectionPool[Any]:
        # Reconnection after a PostgreSQL restart is the pool's job: it checks connections
        # before lending them and retries connecting with backoff. One connection is held by
        # the LISTEN loop; the tick, heartbeats, writes and HTTP share the others.
        timeout = self.statement_timeout

        async def configure(conn: Any) -> None:
            await self.admin._store.configure_session(conn, timeout, timeout * 2)

        return AsyncConnectionPool(
            self.admin._connect_info(),
            min_size=2,
            max_size=6,
            open=False,
            timeout=max(5.0, self.tick_interval.total_seconds() * 3),
            check=AsyncConnectionPool.check_connection,
            configure=configure,
            kwargs={"autocommit": True, "application_name": self._app_name()},
        )
