"""The operations core: every operator action once, as a coroutine that validates its input,
calls the store and wakes the replicas. ``Admin`` (sync), ``AsyncAdmin``, ``Scheduler``, the
HTTP API and the command line are facades over :class:`Operations`; none of them validates or
runs SQL on its own. Owns no connection: it borrows one per action from its connector.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import datetime, timedelta
from typing import Literal, overload
from uuid import UUID

import psycopg

from .._errors import ConfigError, NotFoundError, PgschedError
from .._jobs.spec import JobSpec, evaluate_scopes
from .._planning.schedules import recurrence_plans
from .._records import RunFilter
from .._storage.dashboard import DashboardStore
from .._storage.schedules import ScheduleStore
from .._storage.skips import SkipStore
from .._storage.statements import Conn
from .._storage.store import Store
from .._storage.tasks import TaskStore
from .._structures import (
    Execution,
    FailedAttempt,
    JobStatus,
    LiveReplica,
    RunHistory,
    Scope,
    Triggered,
    check_job_name,
)
from .._times import aware
from .audit import Action, Actor, Entry
from .dashboard import DashboardOperations
from .django_beat import DjangoBeatImport
from .explain import ExplainOperations
from .retention import RetentionOperations
from .schedules import ScheduleOperations
from .tasks import TaskOperations
from .triggers import Triggering

Connector = Callable[[], AbstractAsyncContextManager[Conn]]
RUN_STATUSES = ("PENDING", "RUNNING", "SUCCESS", "FAILED", "CANCELLED")
MAX_LIMIT = 1000
# The driver's base error under the core's name, for the facades (which never import the
# driver): an operation raises it for the database where its connector does not translate it
# (the replica's pool, under the HTTP API).
DriverError = psycopg.Error


def no_jobs() -> Mapping[str, JobSpec]:
    """The jobs of a caller that registers none in code (an Admin of its own)."""
    return {}


def check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not schema or len(schema) > 63:
        raise ConfigError(f"schema={schema!r} must be a name of 1 to 63 characters")
    return schema


class Operations(
    DjangoBeatImport,
    ScheduleOperations,
    DashboardOperations,
    ExplainOperations,
    TaskOperations,
    RetentionOperations,
):
    """Operator actions on one schema. ``jobs`` gives the jobs the caller has registered in
    code (a ``Scheduler``'s); other jobs are known from ``job_state``, where every replica
    records the jobs it runs. The schedule operations of dynamic jobs are in
    :class:`~pgsched._operations.schedules.ScheduleOperations`. Every action that changes
    something is recorded in the action log as ``actor``'s (:mod:`.audit`)."""

    def __init__(
        self,
        schema: str,
        connect: Connector,
        jobs: Callable[[], Mapping[str, JobSpec]] = no_jobs,
        *,
        actor: Actor | None = None,
    ) -> None:
        self._store, self._connect, self._jobs = Store(schema), connect, jobs
        self._actor = actor or Actor.python("admin", None)
        self._schedules = ScheduleStore(schema)
        self._dash = DashboardStore(schema)
        self._tasks = TaskStore(schema)
        self._skips = SkipStore(schema)
        self._knows_jobs = jobs is not no_jobs

    @property
    def schema(self) -> str:
        return self._store.schema

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        async with self._connect() as conn:
            try:
                yield conn
            except psycopg.errors.UndefinedTable:
                raise PgschedError(
                    f"schema {self.schema!r} is not migrated: run `pgsched migrate`"
                ) from None

    # -- schema -----------------------------------------------------------------------------

    async def migrate(self) -> list[str]:
        """Create or upgrade the schema; returns the migration versions applied now.

        Safe when several replicas run it at once (an advisory lock serialises them)."""
        async with self._connect() as conn:
            return await self._store.migrate(conn)

    async def is_migrated(self) -> bool:
        """True when every migration this version ships has been applied."""
        async with self._connect() as conn:
            return await self._store.is_migrated(conn)

    # -- reads ------------------------------------------------------------------------------

    async def status(self) -> list[JobStatus]:
        """Per job: schedule, paused, last plan and status, last success, and how many of its
        runs are running, stale, failed (no retry left) and pending."""
        async with self._conn() as conn:
            return await self._store.job_summary(conn)

    async def runs(
        self,
        job: str | None = None,
        status: str | None = None,
        limit: int = 20,
        *,
        scope: Scope | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after: tuple[datetime, str, Scope] | None = None,
    ) -> list[Execution]:
        """The most recent executions, newest plan first, of ``job``, in ``status`` and of
        ``scope`` when given, with plans at or after ``since`` and before ``until``
        (``limit`` between 1 and 1000). Rows of one plan come in (job, scope) order, and
        ``after``, the (plan time, job, scope) of the last row of a page, starts the next
        page just after that row: keyset pages, none lost or repeated across a plan's
        scopes."""
        if job is not None:
            check_job_name(job)
        state = _run_status(status)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ConfigError(f"limit={limit!r} must be an integer between 1 and {MAX_LIMIT}")
        if scope is not None and not isinstance(scope, Scope):
            raise ConfigError(f"scope={scope!r} must be a pgsched.Scope")
        start = None if since is None else aware(since, "since")
        end = None if until is None else aware(until, "until")
        if start is not None and end is not None and start >= end:
            raise ConfigError(f"since={start.isoformat()} must come before until={end.isoformat()}")
        chosen = RunFilter(
            job,
            state,
            None if scope is None else scope.kind,
            None if scope is None else scope.id,
            start,
            end,
            _run_key(after),
        )
        async with self._conn() as conn:
            found = await self._store.list_runs(conn, chosen, limit)
            # no rows of a job no record names is a typo, not an empty history
            if not found and job is not None and not await self._store.job_known(conn, job):
                raise NotFoundError(f"no job named {job!r}")
        return found

    async def replicas(self) -> list[LiveReplica]:
        """The live replicas: runner id, host, version, start, last registration, the jobs
        each runs and its HTTP address (None when it serves no HTTP)."""
        async with self._conn() as conn:
            return await self._store.list_replicas(conn)

    # -- writes -----------------------------------------------------------------------------

    async def forget(self, job: str) -> None:
        """Remove ``job``, which no live replica registers any more, from ``status``, the
        gauges and the status page; its history rows stay. Refused while a live replica
        registers it (it would come back at that replica's next registration)."""
        check_job_name(job)
        async with self._recorded(Entry(Action.FORGET, job)) as conn:
            forgotten, live = await self._store.forget_job(conn, job)
            if live:
                raise PgschedError(
                    f"job {job!r} is still registered by live replica(s) {', '.join(live)}:"
                    " remove it from their APP and restart them first"
                )
            if not forgotten:
                raise NotFoundError(f"unknown job {job!r}: no replica has registered it")

    @overload
    async def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: Literal[False] = False,
    ) -> Triggered: ...

    @overload
    async def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: Literal[True],
    ) -> list[Triggered]: ...

    @overload
    async def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: bool,
    ) -> Triggered | list[Triggered]: ...

    async def trigger(
        self,
        job: str,
        scope: Scope | None = None,
        at: datetime | None = None,
        *,
        all_scopes: bool = False,
    ) -> Triggered | list[Triggered]:
        """Queue a PENDING manual run of ``job`` and wake every replica. Without ``at`` (or
        with ``at`` not in the future) a run-now: while one of the job and scope is PENDING,
        that one is returned. A future ``at`` is a one-off at that instant, next to any
        run-now; a second trigger for the same instant returns the first, and one whose plan
        already ended is an error. An ``at`` that is a scheduled plan of the scope adds
        nothing: the result (``scheduled_plan``) is that plan's execution once it has one,
        and the scheduled run happens whatever becomes of any manual run. A job with scopes
        other than GLOBAL needs ``scope`` or ``all_scopes=True`` (one run per scope it has
        now: a list); a scope it does not have is refused. ``created`` says whether this call
        inserted the row; ``warnings`` what the caller should know (no live replica runs the
        job, ``at`` in the past)."""
        check_job_name(job)
        when = None if at is None else aware(at, "at")
        local = self._jobs().get(job)
        entry = Entry(Action.TRIGGER, job, "all scopes" if all_scopes else _scope_text(scope))
        if when is not None:
            entry.details["at"] = when.isoformat()
        async with self._recorded(entry) as conn:
            trigger = Triggering(self._store, self._schedules, conn, job, local)
            rows = await trigger.queue(scope, when, all_scopes)
            if any(r.created for r in rows):
                await self._notify(conn, "trigger", job)
            _describe_trigger(entry, rows)
        return rows if all_scopes else rows[0]

    async def failed_attempts(self, limit: int = 20) -> list[FailedAttempt]:
        """The newest failed attempts across jobs, newest first, those of executions that
        were retried and later succeeded included (``limit`` between 1 and 1000)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ConfigError(f"limit={limit!r} must be an integer between 1 and {MAX_LIMIT}")
        async with self._conn() as conn:
            return await self._store.failed_attempts(conn, limit)

    async def run(self, execution_id: UUID | str) -> RunHistory:
        """One execution and every attempt of it, in order (runner, times, error, traceback);
        :class:`NotFoundError` if there is none."""
        ident = _execution_id(execution_id)
        async with self._conn() as conn:
            found = await self._store.get_run(conn, ident)
        if found is None:
            raise NotFoundError(f"execution {ident} does not exist")
        return found

    async def cancel(self, execution_id: UUID | str) -> None:
        """Cancel a PENDING execution; :class:`NotFoundError` if there is none, and an error
        naming its status if it is not PENDING."""
        ident = _execution_id(execution_id)
        async with self._recorded(Entry(Action.CANCEL, execution_id=ident)) as conn:
            outcome = await self._store.cancel(conn, ident)
            if outcome == "missing":
                raise NotFoundError(f"execution {ident} does not exist")
            if outcome != "cancelled":
                raise PgschedError(
                    f"execution {ident} is {outcome}; only PENDING runs can be cancelled"
                )

    async def pause(self, job: str) -> None:
        """Stop planning and claiming ``job`` on every replica within one tick (running
        executions finish)."""
        await self._set_paused(job, True)

    async def resume(self, job: str) -> None:
        """Undo :meth:`pause`. Plans that fell due while the job was paused do not run: they
        are recorded as skipped, reason ``paused``."""
        await self._set_paused(job, False)

    async def _set_paused(self, job: str, paused: bool) -> None:
        check_job_name(job)
        async with self._recorded(Entry(Action.PAUSE if paused else Action.RESUME, job)) as conn:
            if job not in self._jobs():
                await self._ensure_known(conn, job)
            await self._store.set_paused(conn, job, paused)
            await self._notify(conn, "pause" if paused else "resume", job)

    async def backfill(
        self,
        job: str,
        start: datetime,
        end: datetime,
        scopes: Iterable[Scope] | None = None,
    ) -> int:
        """Insert PENDING backfill rows for every plan in ``[start, end]`` and scope (existing
        plans are left alone); returns how many were inserted. ``scopes`` defaults to the
        job's static scopes, or its ``scopes(now)`` answer at ``end``. Needs the job's code
        (its schedule): the caller must have registered it."""
        check_job_name(job)
        spec = self._jobs().get(job)
        if spec is None:
            raise ConfigError(
                f"job {job!r}: backfill needs the job's schedule; run it with the APP that "
                "registers the job (pgsched backfill APP JOB ...)"
            )
        lo, hi = aware(start, "start"), aware(end, "end")
        if hi < lo:
            raise ConfigError(f"job {job!r}: backfill end {hi.isoformat()} is before start")
        if spec.dynamic:
            scopes = None if scopes is None else list(scopes)
            return await self._backfill_dynamic(
                spec, lo, hi, scopes, backfill_entry(job, lo, hi, scopes)
            )
        chosen = list(scopes) if scopes is not None else list(await evaluate_scopes(spec, hi))
        if any(not isinstance(s, Scope) for s in chosen):
            raise ConfigError(f"job {job!r}: scopes must be pgsched.Scope values")
        after = lo - timedelta(microseconds=1)
        bound = MAX_BACKFILL // max(1, len(chosen))  # plans, counted no further than needed
        _refuse_large_backfill(job, recurrence_plans(spec.recurrence, after, hi, bound), chosen)
        plans = list(spec.recurrence.plans_between(after, hi))
        kinds, ids = [s.kind for s in chosen], [s.id for s in chosen]
        entry = backfill_entry(job, lo, hi, chosen)
        async with self._recorded(entry) as conn:
            count = await self._store.backfill(conn, job, kinds, ids, plans, spec.max_attempts)
            await self._notify(conn, "backfill", job)
            entry.details["inserted"] = count
        return count

    # -- plumbing ---------------------------------------------------------------------------

    async def _ensure_known(self, conn: Conn, job: str) -> None:
        if not await self._store.job_exists(conn, job):
            raise NotFoundError(f"unknown job {job!r}: no replica has registered it")


def _scope_text(scope: Scope | None) -> str | None:
    return str(scope) if isinstance(scope, Scope) else None


def _describe_trigger(entry: Entry, rows: list[Triggered]) -> None:
    """A trigger's record: its execution (one scope), whether it created it, or the count."""
    if len(rows) == 1:
        entry.scope, entry.execution_id = str(rows[0].scope), rows[0].id
        entry.details["created"] = rows[0].created
        if rows[0].scheduled_plan:
            entry.details["scheduled_plan"] = True
    else:
        entry.details["runs"] = len(rows)
        entry.details["created"] = sum(1 for r in rows if r.created)


def backfill_entry(job: str, lo: datetime, hi: datetime, scopes: Iterable[Scope] | None) -> Entry:
    """A backfill's record: its range and, for one scope, the scope."""
    chosen = list(scopes) if scopes is not None else []
    entry = Entry(Action.BACKFILL, job, str(chosen[0]) if len(chosen) == 1 else None)
    entry.details.update({"from": lo.isoformat(), "to": hi.isoformat()})
    if len(chosen) > 1:
        entry.details["scopes"] = len(chosen)
    return entry


def _run_status(status: str | None) -> str | None:
    if status is None:
        return None
    if not isinstance(status, str) or status.upper() not in RUN_STATUSES:
        raise ConfigError(f"status={status!r} is not one of {', '.join(RUN_STATUSES)}")
    return status.upper()


def _run_key(after: object) -> tuple[datetime, str, Scope] | None:
    """``after`` checked: a (plan time, job, scope) triple, the plan time aware."""
    if after is None:
        return None
    if not isinstance(after, tuple) or len(after) != 3:
        raise ConfigError(f"after={after!r} must be a (plan time, job, scope) tuple")
    plan, job, scope = after
    if not isinstance(plan, datetime) or not isinstance(job, str):
        raise ConfigError(f"after={after!r} must be a (plan time, job, scope) tuple")
    if not isinstance(scope, Scope):
        raise ConfigError(f"after={after!r}: its scope must be a pgsched.Scope")
    return aware(plan, "after"), check_job_name(job), scope


def _execution_id(execution_id: UUID | str) -> UUID:
    try:
        return UUID(str(execution_id))
    except ValueError:
        raise ConfigError(f"execution id {execution_id!r} is not a UUID") from None


MAX_BACKFILL = 100_000  # rows one backfill may insert: more would outlast a statement timeout


def _refuse_large_backfill(job: str, plans: tuple[int, bool], scopes: list[Scope]) -> None:
    """Refuse a backfill of more than :data:`MAX_BACKFILL` runs before anything is written."""
    count, exact = plans
    total = count * len(scopes)
    if total <= MAX_BACKFILL and exact:
        return
    plural = "scope" if len(scopes) == 1 else "scopes"
    if exact:
        what = f"{total:,} runs ({count:,} plans x {len(scopes)} {plural})"
    else:  # counted only up to one plan past the bound
        what = (
            f"more than {MAX_BACKFILL:,} runs (over {count - 1:,} plans x {len(scopes)} {plural})"
        )
    raise ConfigError(
        f"job {job!r}: backfill of {what} refused: at most {MAX_BACKFILL:,} runs per"
        " backfill; split the range"
    )
