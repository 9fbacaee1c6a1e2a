"""The public ``Scheduler``: job registration and the blocking API around the runtime."""

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

from . import _ops
from ._admin import Admin, aware, blocking
from ._config import Handler, JobSpec, Overlap, ScopesFn, build_job, evaluate_scopes
from ._durations import Duration, parse_duration
from ._errors import ConfigError, NotFoundError, PgschedError
from ._metrics import Metrics
from ._model import GLOBAL, Run, Scope, bound_logger
from ._planning import CatchUp, DstRepeated, DstSkipped, Planner
from ._runtime import Runtime, TickReport
from ._store import Conn, Store

_F = TypeVar("_F", bound=Handler)
PRUNE_JOB = "pgsched.prune"


class Scheduler(Admin):
    """Registers jobs and runs them on this replica, coordinated through PostgreSQL.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed
    (so a command line can still supply it). ``runner_id`` defaults to ``<hostname>-<pid>``.
    ``shutdown_grace`` is how long ``run()`` lets handlers finish after SIGTERM.
    ``statement_timeout`` bounds every statement pgsched runs (and twice that, any idle
    transaction), so a stuck session cannot hold row locks for ever. Metrics go
    to ``registry`` (a fresh ``CollectorRegistry`` by default). With ``retention`` set, a
    built-in job ``pgsched.prune`` deletes finished rows older than that every hour.
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
        super().__init__(dsn=dsn, schema=schema, statement_timeout=statement_timeout)
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
        self.max_concurrency = max_concurrency
        self.metrics = Metrics(registry)
        self.http_port: int | None = None  # the bound port while run() serves HTTP
        self._jobs: dict[str, JobSpec] = {}
        self._jobs_lock = threading.Lock()
        self._runtime: Runtime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = threading.Event()
        self._log = bound_logger(runner_id=self.runner_id)
        if retention is not None:
            self._register_retention(parse_duration(retention, field="retention", allow_zero=False))

    def _app_name(self) -> str:
        return f"pgsched {self.runner_id}"[:63]

    # -- configuration ------------------------------------------------------------------

    def configure(
        self, *, dsn: str | None = None, schema: str | None = None, runner_id: str | None = None
    ) -> None:
        """Override connection settings (the command line's ``--dsn``, ``--schema``...)."""
        if dsn:
            self._dsn = dsn
        if schema:
            self.schema = schema
        if runner_id:
            self.runner_id = runner_id
            self._log = bound_logger(runner_id=runner_id)

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
        """Decorator form of :meth:`register`; returns the handler unchanged.

        Durations take a ``timedelta``, seconds, or text such as ``"90s"``, ``"1h30m"``.

        - ``name``: the job's name, unique in this scheduler (default: the function's name).
        - ``every``: a fixed cadence; plans are its multiples since the Unix epoch (UTC).
        - ``cron``: a 5-field cron expression read in ``timezone`` (exactly one of
          ``every``, ``cron``, ``planner``).
        - ``planner``: an object with ``plans_between(start, end)`` giving plan instants.
        - ``timezone``: the IANA zone of ``cron``.
        - ``scopes``: ``Scope`` values, or ``scopes(now)`` (sync or async) evaluated every
          tick; default the single ``pgsched.GLOBAL`` scope.
        - ``catch_up``: ``"latest_only"`` runs only the newest due plan; ``"every_plan"``
          runs every missed plan after the scope's latest, oldest first.
        - ``catch_up_window``: ``every_plan`` ignores plans older than this.
        - ``max_plans_per_tick``: plans claimed per scope per tick (required by
          ``every_plan``).
        - ``max_lateness``: a plan not started within this of its due time is skipped.
        - ``schedule_delay``: a plan is due this long after its plan time.
        - ``overlap``: ``"forbid"`` starts no plan of a scope while an earlier one runs;
          ``"allow"`` does.
        - ``jitter``: delays each (scope, plan) by a deterministic fraction of this.
        - ``dst_repeated``: ``"first"``, ``"last"`` or ``"both"``: where a wall time
          repeated by fall-back fires (default: by the expression's kind, SPEC §3).
        - ``dst_skipped``: ``"shift"`` or ``"skip"``: a wall time skipped by spring-forward.
        - ``run_timeout``: a handler running longer is FAILED ``run_timeout``.
        - ``stale_timeout``: a lease not renewed this long is stale (> ``run_timeout``;
          default ``run_timeout`` + 1 minute).
        - ``heartbeat_interval``: how often the lease is renewed (< ``stale_timeout``;
          default a third of it, at most 30 s).
        - ``allow_stale_reentry``: a stale lease is stolen (True) or failed (False).
        - ``max_attempts``: attempts per plan, retries included.
        - ``retry_backoff``: delay before attempt ``i + 2``; the last entry repeats.
        - ``max_running``: cluster-wide cap on this job's running executions.
        - ``priority``: higher claims first when slots are scarce.
        - ``transactional``: the handler gets ``run.conn``, a transaction that commits
          with the SUCCESS row if and only if the lease still holds.
        """
        options = {k: v for k, v in locals().items() if k != "self"}

        def decorate(handler: _F) -> _F:
            self.register(handler, **options)
            return handler

        return decorate

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
            deleted = await self._with_conn(lambda c, s: _ops.prune(c, s, older_than))
            run.log.info("pruned", deleted=deleted, older_than_s=older_than.total_seconds())
            return deleted

        self.register(prune, name=PRUNE_JOB, every="1h", run_timeout="30m", stale_timeout="35m")

    # -- database operations on this scheduler's jobs -----------------------------------

    def trigger(self, job: str, scope: Scope = GLOBAL, at: datetime | None = None) -> UUID:
        """Insert a PENDING manual run (at the database's now, or at ``at``) and wake every
        replica. While one is PENDING for the same job and scope, returns that one instead.
        """
        spec = self._job(job)
        when = None if at is None else aware(at, "at")

        async def go(conn: Conn, store: Store) -> UUID:
            row = await _ops.trigger(conn, store, job, scope, when, spec.max_attempts)
            return UUID(str(row["id"]))

        return self._call(go)

    def _set_paused(self, job: str, paused: bool) -> None:
        self._job(job)
        self._call(lambda conn, store: _ops.set_paused(conn, store, job, paused))

    def backfill(
        self, job: str, start: datetime, end: datetime, scopes: Iterable[Scope] | None = None
    ) -> int:
        """Insert PENDING backfill rows for every plan in ``[start, end]`` and scope.

        Existing plans are left alone; returns the number of rows inserted. ``scopes``
        defaults to the job's static scopes, or the callable's answer at ``end``.
        """
        spec = self._job(job)
        lo, hi = aware(start, "start"), aware(end, "end")
        if hi < lo:
            raise ConfigError(f"job {job!r}: backfill end {hi.isoformat()} is before start")
        plans = list(spec.schedule.plans_between(lo - timedelta(microseconds=1), hi))

        async def go(conn: Conn, store: Store) -> int:
            chosen = list(scopes) if scopes is not None else await evaluate_scopes(spec, hi)
            return await _ops.backfill(conn, store, job, chosen, plans, spec.max_attempts)

        return self._call(go)

    # -- running ------------------------------------------------------------------------

    def run_once(self) -> TickReport:
        """One full tick: plan, claim, run the claimed handlers to completion, write rows."""
        return blocking(self._run_once())

    async def _run_once(self) -> TickReport:
        async with self._pool() as pool:
            runtime = self._new_runtime(pool)
            runtime.start_background(listen=False)
            if not await runtime.tick():
                await runtime.shutdown(timedelta(0))
                raise PgschedError("the tick failed; see the tick_error log event")
            await runtime.wait_idle()
            await runtime.shutdown(timedelta(0))
            return runtime.report

    def run(self, http_port: int | None = None, http_host: str = "127.0.0.1") -> None:
        """Tick until SIGTERM/SIGINT or :meth:`stop`, then shut down gracefully.

        With ``http_port`` (0 picks a free one, kept in ``self.http_port``) the replica
        serves ``/metrics``, ``/healthz``, ``/readyz``, ``/`` and ``/api/`` on ``http_host``.
        """
        try:
            asyncio.run(self._run(http_port, http_host))
        finally:
            self._stop_requested.clear()  # a stop() before run() began still counts

    def stop(self) -> None:
        """Ask a running :meth:`run` to shut down (thread-safe)."""
        self._stop_requested.set()
        runtime, loop = self._runtime, self._loop
        if runtime is not None and loop is not None:
            loop.call_soon_threadsafe(runtime.request_stop)

    async def _run(self, http_port: int | None, http_host: str) -> None:
        loop = asyncio.get_running_loop()
        async with self._pool() as pool:
            runtime = self._new_runtime(pool)
            self._runtime, self._loop = runtime, loop
            on_main = threading.current_thread() is threading.main_thread()
            if on_main:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.add_signal_handler(sig, self._on_signal, sig, runtime)
            server = None
            try:
                if self._stop_requested.is_set():
                    runtime.request_stop()
                if http_port is not None:
                    from ._http import HttpServer

                    server = HttpServer(
                        jobs=lambda: self.jobs,
                        runtime=runtime,
                        store=Store(self.schema),
                        pool=pool,
                        metrics=self.metrics,
                        log=self._log,
                    )
                    self.http_port = await server.start(http_host, http_port)
                    url = f"http://{http_host}:{self.http_port}/"
                    self._log.info(
                        "http_listening",
                        status_page=url,
                        metrics=f"{url}metrics",
                        host=http_host,
                        port=self.http_port,
                    )
                self._log.info(
                    "scheduler_started",
                    jobs=sorted(self.jobs),
                    schema=self.schema,
                    max_concurrency=self.max_concurrency,
                    tick_interval_s=self.tick_interval.total_seconds(),
                )
                runtime.start_background(listen=True)
                await runtime.run_forever()
                await runtime.shutdown(self.shutdown_grace)
                self._log.info("scheduler_stopped", **_report_fields(runtime.report))
            finally:
                if server is not None:
                    await server.stop()
                self._runtime = self._loop = None
                self.http_port = None
                if on_main:
                    for sig in (signal.SIGTERM, signal.SIGINT):
                        loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals, runtime: Runtime) -> None:
        self._log.info("shutdown_requested", signal=sig.name)
        runtime.request_stop()

    def _new_runtime(self, pool: AsyncConnectionPool[Any]) -> Runtime:
        return Runtime(
            jobs=lambda: self.jobs,
            store=Store(self.schema),
            pool=pool,
            runner_id=self.runner_id,
            max_concurrency=self.max_concurrency,
            tick_interval=self.tick_interval,
            events=self.metrics,
            conninfo=self._require_dsn(),
            app_name=self._app_name(),
        )

    async def _configure_connection(self, conn: Any) -> None:
        await Store(self.schema).configure_session(
            conn, self.statement_timeout, self.statement_timeout * 2
        )

    def _pool(self) -> AsyncConnectionPool[Any]:
        dsn = self._require_dsn()
        # Reconnection after a PostgreSQL restart is the pool's job: it checks connections
        # before lending them and retries connecting with backoff. One connection is held by
        # the LISTEN loop; the tick, heartbeats, writes and HTTP share the others.
        return AsyncConnectionPool(
            dsn,
            min_size=2,
            max_size=6,
            open=False,
            timeout=max(5.0, self.tick_interval.total_seconds() * 3),
            check=AsyncConnectionPool.check_connection,
            configure=self._configure_connection,
            kwargs={"autocommit": True, "application_name": self._app_name()},
        )


def _report_fields(report: TickReport) -> dict[str, int]:
    return {k: v for k, v in vars(report).items() if isinstance(v, int)}
