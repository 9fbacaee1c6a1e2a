"""The public ``Scheduler``: job registration, the replica's lifecycle (``run``, ``serve``,
``run_once``), and the operator actions on its jobs through the ``Admin`` it has (its
shortcuts, ``_facades.sync_operations.SchedulerShortcuts``, are generated from the operations
core; those on one job first check that it registered the job).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
from datetime import timedelta
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry

from ._dsn import require_dsn, resolve_synchronous_claims, resolve_transaction_pooling
from ._engine.runtime import Runtime
from ._engine.settings import ReplicaSettings
from ._errors import ConfigError, PgschedError
from ._facades.admin import Admin
from ._facades.aio import AsyncAdmin
from ._facades.sync_operations import SchedulerShortcuts
from ._jobs.registry import JobRegistry
from ._jobs.spec import FailureHook, Handler, RecoveryHook, RunHooks
from ._operations.core import Operations
from ._portal import PORTAL
from ._replica import Replica
from ._run import Run, RunTransaction
from ._storage.connection import WritablePool, make_pool
from ._storage.store import Store
from ._structures import TickReport
from ._telemetry.logs import bound_logger
from ._telemetry.metrics import Metrics
from ._times import Duration, parse_duration

_F = TypeVar("_F", bound=Handler)


def _setting(value: Duration | None, field: str, default: str) -> timedelta:
    """A duration option: ``value``, else ``PGSCHED_<FIELD>``, else ``default``."""
    given = value or os.environ.get(f"PGSCHED_{field.upper()}") or default
    return parse_duration(given, field=field, allow_zero=False)


PRUNE_JOB = "pgsched.prune"


class Scheduler(JobRegistry, SchedulerShortcuts):
    """Registers jobs and runs them on this replica, coordinated through PostgreSQL.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed
    (so a command line can still supply it). ``runner_id`` defaults to ``<hostname>-<pid>``.
    ``shutdown_grace`` is how long handlers may finish after SIGTERM, ``stop()`` or the
    cancellation of ``serve()``. ``statement_timeout`` bounds every statement pgsched runs
    (and twice that, any idle transaction). Metrics go to ``registry`` (a fresh
    ``CollectorRegistry`` by default). With ``retention`` set, a built-in job
    ``pgsched.prune`` deletes finished rows older than that every hour. With
    ``transaction_pooling`` (else ``PGSCHED_TRANSACTION_POOLING``) it works through a
    transaction-pooling PgBouncer: no LISTEN, no prepared statements, no session settings
    outside a transaction (docs/pgbouncer.md). ``/healthz`` answers 503 once the tick loop or the
    terminal writer has not succeeded for ``health_timeout`` (else
    ``PGSCHED_HEALTH_TIMEOUT``, else 20 s). A server that leaves one of the engine's
    statements unanswered for ``answer_timeout`` (else ``PGSCHED_ANSWER_TIMEOUT``, else 5 s)
    and whose host then does not react to a probe within 2 s has its connection dropped and
    the statement retried on another (docs/failover.md). A replica that died leaves the live
    replicas (the dashboard, ``pgsched replicas``, ``forget``) once its row was not renewed for
    three renewal intervals, ``replica_renewal`` (else ``PGSCHED_REPLICA_RENEWAL``, else
    10 s), and its row is removed after ``replica_expiry`` (else ``PGSCHED_REPLICA_EXPIRY``,
    else 10 minutes).
    With ``synchronous_claims`` (else ``PGSCHED_SYNCHRONOUS_CLAIMS``) claims and terminal
    writes commit only once a synchronous standby has them, so a failover cannot undo them
    (docs/design.md). ``on_failure(run, error)`` and ``on_recovery(run)`` are called for
    every job, as well as each job's own (docs/hooks.md). Operator actions on the jobs
    (``trigger``, ``pause``...) go through ``self.admin``; ``self.aio`` offers them as
    coroutines.
    """

    # Where its sync transactional runs' transactions come from: a framework's scheduler
    # (pgsched.django's) lends the framework's; None, a connection of each run's own.
    _run_transaction: RunTransaction | None = None

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
        transaction_pooling: bool | None = None,
        health_timeout: Duration | None = None,
        synchronous_claims: bool | None = None,
        answer_timeout: Duration | None = None,
        replica_expiry: Duration | None = None,
        on_failure: FailureHook | None = None,
        on_recovery: RecoveryHook | None = None,
        replica_renewal: Duration | None = None,
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
        self.health_timeout = _setting(health_timeout, "health_timeout", "20s")
        self.answer_timeout = _setting(answer_timeout, "answer_timeout", "5s")
        self.replica_expiry = _setting(replica_expiry, "replica_expiry", "10m")
        self.replica_renewal = _setting(replica_renewal, "replica_renewal", "10s")
        self.max_concurrency = max_concurrency
        self.hooks = RunHooks.checked("scheduler", on_failure, on_recovery)
        self.metrics = Metrics(registry)
        self.http_port: int | None = None  # the bound port while the replica serves HTTP
        self._dsn, self.schema = dsn, schema
        self.transaction_pooling = resolve_transaction_pooling(transaction_pooling)
        self.synchronous_claims = resolve_synchronous_claims(synchronous_claims)
        JobRegistry.__init__(self, self.metrics)
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

    def _operator_options(self) -> dict[str, Any]:
        """What this scheduler's ``Admin`` and ``AsyncAdmin`` connect with, and its jobs."""
        return {
            "dsn": self._dsn,
            "schema": self.schema,
            "statement_timeout": self.statement_timeout,
            "jobs": lambda: self.jobs,
            "app_name": self._app_name(),
            "transaction_pooling": self.transaction_pooling,
        }

    def _new_admin(self) -> Admin:
        return Admin(**self._operator_options())

    def _core(self) -> Operations:
        return self.admin.operations

    def configure(
        self,
        *,
        dsn: str | None = None,
        schema: str | None = None,
        runner_id: str | None = None,
        transaction_pooling: bool | None = None,
        synchronous_claims: bool | None = None,
    ) -> None:
        """Override connection settings (the command line's ``--dsn``, ``--schema``...)."""
        self._dsn = dsn or self._dsn
        self.schema = schema or self.schema
        self.runner_id = runner_id or self.runner_id
        if transaction_pooling is not None:
            self.transaction_pooling = transaction_pooling
        if synchronous_claims is not None:
            self.synchronous_claims = resolve_synchronous_claims(synchronous_claims)
        self.admin = self._new_admin()
        self._aio = None

    @property
    def aio(self) -> AsyncAdmin:
        """The operator actions as coroutines, on a small pool of their own opened on first
        use (on the running loop) and closed when ``serve()`` returns."""
        if self._aio is None:
            self._aio = AsyncAdmin(**self._operator_options())
        return self._aio

    def _register_retention(self, older_than: timedelta) -> None:
        async def prune(run: Run) -> int:
            deleted = await self.admin.operations.prune(older_than)
            run.log.info("pruned", deleted=deleted, older_than_s=older_than.total_seconds())
            return deleted

        self.register(prune, name=PRUNE_JOB, every="1h", run_timeout="30m", stale_timeout="35m")

    # -- running ----------------------------------------------------------------------------

    def run_once(self) -> TickReport:
        """One full tick: plan, claim, run the claimed handlers to completion, write rows (on
        the portal's loop, where the ``Admin``'s calls run)."""
        return PORTAL.call(self._run_once())

    async def _run_once(self) -> TickReport:
        pool = self._pool()  # the replica opens it once the database answers
        try:
            report = await self._new_replica(pool).once()
        finally:
            await pool.close()
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
        pool = self._pool()  # the replica opens it once the database answers
        try:
            replica = self._new_replica(pool)
            self._replica = replica
            if self._stop_requested.is_set():
                replica.stop()
            await replica.serve(http_port, http_host, self._on_listening)
        finally:
            await pool.close()
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

    def _new_replica(self, pool: WritablePool) -> Replica:
        settings = ReplicaSettings(
            self.schema,
            self.runner_id,
            self.max_concurrency,
            self.tick_interval,
            self.shutdown_grace,
            require_dsn(self.dsn),
            self._app_name(),
            transaction_pooling=self.transaction_pooling,
            health_timeout=self.health_timeout,
            synchronous_claims=self.synchronous_claims,
            answer_timeout=self.answer_timeout,
            statement_timeout=self.statement_timeout,
            replica_expiry=self.replica_expiry,
            hooks=self.hooks,
            replica_renewal=self.replica_renewal,
            run_transaction=self._run_transaction,
        )
        return Replica(Runtime(lambda: self.jobs, pool, self.metrics, settings))

    def _pool(self) -> WritablePool:
        # Reconnection after a PostgreSQL restart is the pool's job: it checks connections
        # before lending them and retries connecting with backoff. One connection is held by
        # the LISTEN loop; the tick, heartbeats, writes and HTTP share the others.
        timeout, store = self.statement_timeout, Store(self.schema)

        async def configure(conn: Any) -> None:
            if not self.transaction_pooling:  # a pooler's server sessions are shared
                await store.configure_session(conn, timeout, timeout * 2)

        return make_pool(
            require_dsn(self.dsn),
            store=store,
            app_name=self._app_name(),
            transaction_pooling=self.transaction_pooling,
            min_size=2,
            max_size=6,
            timeout=max(5.0, self.tick_interval.total_seconds() * 3),
            answer_timeout=self.answer_timeout.total_seconds(),
            session=configure,
        )
