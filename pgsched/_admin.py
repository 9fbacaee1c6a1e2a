"""``Admin``: the operations core (``_operations``) for synchronous callers. Translates and
calls, nothing more: validation and SQL live below it. Operations run on the process's portal
loop (``_portal``), where the Admin keeps a few idle connections between calls
(``_operations.connectors``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable, Coroutine, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal, Never, TypeVar, overload
from uuid import UUID

from ._config import JobSpec
from ._dsn import resolve_dsn, resolve_transaction_pooling
from ._model import Scope
from ._operations.audit import Actor
from ._operations.connectors import KeptConnections
from ._operations.core import Operations, check_schema, no_jobs
from ._operations.dashboard import JobGrid, SchedulePage
from ._operations.django_beat import ImportReport
from ._planning.schedules import Schedule, ScheduleSpec
from ._portal import PORTAL
from ._records import PreviousTask, RecordedTask, TaskAttempt
from ._times import Duration, parse_duration
from ._views import (
    ActionRecord,
    Execution,
    Explanation,
    FailedAttempt,
    JobStatus,
    LiveReplica,
    PlanSummary,
    RunHistory,
    Triggered,
    UpcomingPlan,
)

_T = TypeVar("_T")


class ScheduleMethods:
    """The schedule operations of dynamic jobs (docs/schedules.md) for sync callers: on
    ``Admin`` and on ``Scheduler``. Each validates everything before it writes and writes
    nothing when anything is invalid (``ConfigError`` naming the job, the scope, the field,
    the value)."""

    def _schedule_operations(self) -> Operations:
        """The operations core the schedule methods run on the portal's loop."""
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
        **unknown: Never,  # refused by type checkers; at run time, named with the field meant
    ) -> Schedule:
        """Create or replace the schedule of ``scope`` (exactly one of ``every`` / ``cron``);
        its first plan is strictly after the put. Returns it as stored."""
        return PORTAL.call(
            self._schedule_operations().put_schedule(
                job,
                scope,
                every=every,
                cron=cron,
                timezone=timezone,
                payload=payload,
                starts_at=starts_at,
                ends_at=ends_at,
                paused=paused,
                **unknown,
            )
        )

    def put_schedules(self, job: str, specs: Iterable[ScheduleSpec]) -> int:
        """Create or replace many schedules in one transaction, all or nothing; returns how
        many were written (one identical to the stored schedule is not)."""
        return PORTAL.call(self._schedule_operations().put_schedules(job, specs))

    def get_schedule(self, job: str, scope: Scope) -> Schedule | None:
        """The stored schedule of ``scope``, or None."""
        return PORTAL.call(self._schedule_operations().get_schedule(job, scope))

    def list_schedules(
        self, job: str, *, after: Scope | None = None, limit: int = 100
    ) -> list[Schedule]:
        """Up to ``limit`` schedules ordered by scope kind then id, after the scope ``after``."""
        return PORTAL.call(
            self._schedule_operations().list_schedules(job, after=after, limit=limit)
        )

    def delete_schedule(self, job: str, scope: Scope) -> bool:
        """Delete the schedule (its runs stay); False when there was none."""
        return PORTAL.call(self._schedule_operations().delete_schedule(job, scope))

    def pause_schedule(self, job: str, scope: Scope) -> None:
        """No plan of the schedule is claimed until it is resumed (``NotFoundError`` if none)."""
        PORTAL.call(self._schedule_operations().pause_schedule(job, scope))

    def resume_schedule(self, job: str, scope: Scope) -> None:
        """Resume the schedule; plans that fell due while it was paused are skipped (``paused``)."""
        PORTAL.call(self._schedule_operations().resume_schedule(job, scope))


class TriggerMethod:
    """``trigger`` for sync callers, typed once: on ``Admin`` and on ``Scheduler``."""

    def _trigger(
        self, job: str, scope: Scope | None, at: datetime | None, all_scopes: bool
    ) -> Triggered | list[Triggered]:
        raise NotImplementedError

    @overload
    def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: Literal[False] = False,
    ) -> Triggered: ...

    @overload
    def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: Literal[True],
    ) -> list[Triggered]: ...

    def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: bool = False,
    ) -> Triggered | list[Triggered]:
        """Queue a manual run of ``job`` now (or a one-off at a future ``at``) and wake every
        replica; ``created`` says whether this call inserted it (docs/reference.md,
        "Triggers"). A scoped job needs ``scope`` or ``all_scopes=True`` (a list). On a
        ``Scheduler``, ``job`` must be one it registered."""
        return self._trigger(job, scope, at, all_scopes)


class Admin(ScheduleMethods, TriggerMethod):
    """Operator actions on one database and schema, for code that is not ``async``.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed.
    Each action borrows a connection (statements bounded by ``statement_timeout``): an idle
    one this Admin kept from an earlier action, checked first, or a new one; up to
    ``KEEP_IDLE`` (4) stay open between actions, until :meth:`close` or the interpreter exits.
    Safe to share between threads. The same actions as coroutines: :class:`AsyncAdmin`.
    Its actions are recorded in the action log as ``actor``'s (default ``python:user@host``),
    surface ``admin``.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgsched",
        statement_timeout: Duration = "30s",
        *,
        jobs: Callable[[], Mapping[str, JobSpec]] = no_jobs,
        app_name: str = "pgsched admin",
        transaction_pooling: bool | None = None,
        actor: str | None = None,
        surface: str = "admin",
    ) -> None:
        self._dsn = dsn
        self.schema = check_schema(schema)
        self.statement_timeout = parse_duration(
            statement_timeout, field="statement_timeout", allow_zero=False
        )
        self.transaction_pooling = resolve_transaction_pooling(transaction_pooling)
        self._connections = KeptConnections(
            dsn,
            self.schema,
            app_name=app_name,
            transaction_pooling=self.transaction_pooling,
            statement_timeout=self.statement_timeout,
        )
        # Who its actions are recorded as: ``actor``, else python:user@host (``surface`` is
        # the command line's "cli" when it is the one acting).
        self._ops = Operations(
            self.schema, self._connections.connect, jobs, actor=Actor.python(surface, actor)
        )
        self._connections.close_with(self)  # collected, or the interpreter exits

    @property
    def dsn(self) -> str | None:
        return resolve_dsn(self._dsn)

    @property
    def operations(self) -> Operations:
        """The coroutines behind this Admin's methods, for code on a loop of its own (such
        as the scheduler's retention job): each action there gets a connection of its own."""
        return self._ops

    def close(self) -> None:
        """Close the connections kept between actions (a later action opens new ones)."""
        self._connections.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _schedule_operations(self) -> Operations:
        return self._ops

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migration versions applied now (safe when
        several replicas run it at once)."""
        return PORTAL.call(self._ops.migrate())

    def is_migrated(self) -> bool:
        """True when every migration this version ships has been applied."""
        return PORTAL.call(self._ops.is_migrated())

    def status(self) -> list[JobStatus]:
        """Per job: schedule, paused, last plan and status, last success, and its running,
        stale, failed (no retry left) and pending counts."""
        return PORTAL.call(self._ops.status())

    def runs(
        self,
        job: str | None = None,
        status: str | None = None,
        limit: int = 20,
        *,
        scope: Scope | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[Execution]:
        """The most recent executions, newest plan first (``limit`` between 1 and 1000), of
        ``job``, in ``status`` and of ``scope`` when given, with plans at or after ``since``
        and before ``until``."""
        return PORTAL.call(
            self._ops.runs(job, status, limit, scope=scope, since=since, until=until)
        )

    def replicas(self) -> list[LiveReplica]:
        """The live replicas: runner id, host, version, start, last seen, jobs, HTTP address."""
        return PORTAL.call(self._ops.replicas())

    def forget(self, job: str) -> None:
        """Remove ``job``, which no live replica registers any more, from ``status``, the
        gauges and the status page (its history rows stay)."""
        PORTAL.call(self._ops.forget(job))

    def _trigger(
        self, job: str, scope: Scope | None, at: datetime | None, all_scopes: bool
    ) -> Triggered | list[Triggered]:
        if all_scopes:
            return PORTAL.call(self._ops.trigger(job, scope, at, all_scopes=True))
        return PORTAL.call(self._ops.trigger(job, scope, at))

    def run(self, execution_id: UUID | str) -> RunHistory:
        """One execution and every attempt of it, in order (runner, times, error, traceback)."""
        return PORTAL.call(self._ops.run(execution_id))

    def failed_attempts(self, limit: int = 20) -> list[FailedAttempt]:
        """The newest failed attempts across jobs, those of runs later retried included."""
        return PORTAL.call(self._ops.failed_attempts(limit))

    def cancel(self, execution_id: UUID | str) -> None:
        """Cancel a PENDING execution."""
        PORTAL.call(self._ops.cancel(execution_id))

    def record_task_attempt(
        self, execution_id: UUID | str, attempt: TaskAttempt
    ) -> RecordedTask | None:
        """Keep a consumer's run of the task ``execution_id`` sent (``pgsched.celery.track``)
        as an attempt of it (a final outcome of a Celery job's task becomes the execution's
        status); what was done, or None when there is no such execution."""
        return PORTAL.call(self._ops.record_task_attempt(execution_id, attempt))

    def settle_task(self, execution_id: UUID | str) -> RecordedTask | None:
        """Make the newest final outcome recorded for ``execution_id`` its status (once the
        row its publish left RUNNING is written)."""
        return PORTAL.call(self._ops.settle_task(execution_id))

    def previous_task(
        self, job: str, scope: Scope, plan_time: datetime, lost_after: float
    ) -> PreviousTask | None:
        """``overlap="forbid"`` of a Celery entry: the scope's newest earlier plan whose task
        was sent, and whether its outcome is recorded."""
        return PORTAL.call(self._ops.previous_task(job, scope, plan_time, lost_after))

    def job_overview(self) -> list[JobStatus]:
        """``status()`` for the dashboard: at most 1000 jobs, each count stopping past 1,000."""
        return PORTAL.call(self._ops.job_overview())

    def plan_history(
        self, job: str, *, limit: int = 30, before: datetime | None = None
    ) -> list[PlanSummary]:
        """The job's latest plans with their outcome, start lag and duration (the dashboard's
        strip and charts)."""
        return PORTAL.call(self._ops.plan_history(job, limit=limit, before=before))

    def job_grid(
        self,
        job: str,
        *,
        search: str | None = None,
        after: Scope | None = None,
        rows: int = 50,
        plans: int = 12,
        before: datetime | None = None,
    ) -> JobGrid:
        """A page of the job's scopes by its latest plans, each cell an execution."""
        grid = self._ops.job_grid(
            job, search=search, after=after, rows=rows, plans=plans, before=before
        )
        return PORTAL.call(grid)

    def schedules_page(
        self,
        job: str,
        *,
        search: str | None = None,
        after: Scope | None = None,
        limit: int = 50,
        runs: int = 5,
    ) -> SchedulePage:
        """A page of a dynamic job's schedules with each one's latest runs."""
        page = self._ops.schedules_page(job, search=search, after=after, limit=limit, runs=runs)
        return PORTAL.call(page)

    def job_failures(self, job: str, limit: int = 20) -> list[Execution]:
        """The job's latest FAILED executions, newest first."""
        return PORTAL.call(self._ops.job_failures(job, limit))

    def job_pending(self, job: str, limit: int = 20) -> list[Execution]:
        """The job's PENDING executions, earliest plan first."""
        return PORTAL.call(self._ops.job_pending(job, limit))

    def job_upcoming(self, job: str, limit: int = 10) -> list[UpcomingPlan]:
        """The job's next plans."""
        return PORTAL.call(self._ops.job_upcoming(job, limit))

    def actions(self, job: str | None = None, limit: int = 20) -> list[ActionRecord]:
        """The latest recorded operator actions, newest first."""
        return PORTAL.call(self._ops.actions(job, limit))

    def retry_now(self, execution_id: UUID | str) -> str:
        """Make a FAILED execution due for a retry now (one more attempt if it had none
        left); returns its job."""
        return PORTAL.call(self._ops.retry_now(execution_id))

    def pause(self, job: str) -> None:
        """Stop planning and claiming ``job`` on every replica within one tick."""
        PORTAL.call(self._ops.pause(job))

    def resume(self, job: str) -> None:
        """Undo :meth:`pause`."""
        PORTAL.call(self._ops.resume(job))

    def explain(
        self,
        job: str,
        scope: Scope | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
    ) -> Explanation:
        """What happened to each plan of ``job`` in ``[since, until]`` (default: the last 24
        hours): ran, running, skipped and why, due, not due yet; the last ``limit`` lines."""
        return PORTAL.call(self._ops.explain(job, scope, since, until, limit))

    def backfill(
        self, job: str, start: datetime, end: datetime, scopes: Iterable[Scope] | None = None
    ) -> int:
        """Queue every plan of ``job`` in ``[start, end]`` (a job registered in code)."""
        return PORTAL.call(self._ops.backfill(job, start, end, scopes))

    def prune(self, older_than: Duration) -> int:
        """Delete finished runs older than ``older_than``; each scope's newest plan stays."""
        return PORTAL.call(self._ops.prune(older_than))

    def import_django_celery_beat(
        self, from_dsn: str | None = None, *, dry_run: bool = False
    ) -> ImportReport:
        """Copy django-celery-beat's enabled periodic tasks (on ``from_dsn``, else this
        Admin's database) into schedules of the dynamic job ``celery`` (docs/celery.md)."""
        return PORTAL.call(self._ops.import_django_celery_beat(from_dsn, dry_run=dry_run))


class AdminShortcuts(ScheduleMethods, TriggerMethod):
    """``Admin``'s operator actions on a ``Scheduler``: documented shortcuts for
    ``scheduler.admin.<method>``, with the same parameters and return types. The actions on
    one job first check that the scheduler registered it (``NotFoundError``)."""

    admin: Admin

    def _job(self, name: str) -> JobSpec:
        """The registered job ``name`` (the registry's), else ``NotFoundError``."""
        raise NotImplementedError

    def _schedule_operations(self) -> Operations:
        return self.admin.operations

    def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migration versions applied now."""
        return self.admin.migrate()

    def status(self) -> list[JobStatus]:
        """Per job: schedule, paused, last plan and status, last success, counts."""
        return self.admin.status()

    def runs(
        self, job: str | None = None, status: str | None = None, limit: int = 20
    ) -> list[Execution]:
        """The most recent executions, newest plan first."""
        return self.admin.runs(job, status, limit)

    def _trigger(
        self, job: str, scope: Scope | None, at: datetime | None, all_scopes: bool
    ) -> Triggered | list[Triggered]:
        self._job(job)  # a job of this scheduler (with its max_attempts)
        if all_scopes:
            return self.admin.trigger(job, scope, at, all_scopes=True)
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
