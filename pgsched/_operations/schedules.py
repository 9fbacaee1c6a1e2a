"""The operations core for schedules as data (docs/schedules.md): put, get, list, delete, pause
and resume the stored schedules of a dynamic job, and backfill them. Part of
:class:`~pgsched._operations.core.Operations` (which ``Admin``, ``AsyncAdmin``,
``Scheduler``, the HTTP API and the command line call); validates everything before it
writes, and writes every change in one transaction with a NOTIFY, so replicas see it within
a second.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Never

from .._errors import ConfigError, NotFoundError
from .._jobs.spec import JobSpec
from .._planning.calendars import Calendar
from .._planning.payloads import PAYLOAD_CHECKS, PayloadError
from .._planning.schedules import (
    ValidSchedule,
    check_fields,
    check_schedule,
    first_plan_after,
    plans_between,
    read_schedule,
    stored_schedule,
)
from .._records import ScheduleRows
from .._storage.schedules import ScheduleStore
from .._storage.statements import ANALYZE_AFTER, Conn
from .._storage.store import Store
from .._structures import Schedule, ScheduleSpec, Scope, check_job_name
from .._times import US, Duration
from .audit import Action, Audited, Entry

MAX_PAGE = 1000
MAX_BACKFILL_PLANS = 100_000  # per scope and call


class ScheduleOperations(Audited):
    """The schedule operations of :class:`~pgsched._operations.core.Operations` (which sets the
    attributes declared here)."""

    _store: Store
    _schedules: ScheduleStore
    _jobs: Callable[[], Mapping[str, JobSpec]]
    _knows_jobs: bool  # the caller registered its jobs in code (a Scheduler)
    _conn: Callable[[], AbstractAsyncContextManager[Conn]]

    async def _notify(self, conn: Conn, event: str, job: str) -> None:
        await self._store.notify(conn, json.dumps({"event": event, "job": job}))

    async def put_schedule(
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
        calendar: str | None = None,
        on_excluded: str = "skip",
        **unknown: Never,  # refused by type checkers; here, named with the field meant
    ) -> Schedule:
        """Create or replace the schedule of ``scope``; returns it as stored."""
        check_fields(job, scope, unknown)
        spec = ScheduleSpec(
            scope, every, cron, timezone, payload, starts_at, ends_at, paused, calendar, on_excluded
        )
        valid = check_payload(check_schedule(job, spec, self._calendars_of(job)))
        entry = Entry(Action.SCHEDULE_PUT, valid.job, str(scope))
        async with self._recorded(entry) as conn:
            entry.details["written"] = await self._put(conn, job, [valid])
            row = await self._schedules.get_schedule(conn, valid.job, scope.kind, scope.id)
        assert row is not None
        return read_schedule(valid.job, row)

    async def put_schedules(self, job: str, specs: Iterable[ScheduleSpec]) -> int:
        """Create or replace many schedules in one transaction, all or nothing; returns how
        many were written (a schedule identical to the stored one is not)."""
        job = check_job_name(job)
        calendars = self._calendars_of(job)
        valid = [check_payload(check_schedule(job, spec, calendars)) for spec in specs]
        seen: set[tuple[str, str]] = set()
        for v in valid:
            key = (v.scope.kind, v.scope.id)
            if key in seen:
                raise ConfigError(f"job {job!r}, scope {v.scope}: given twice in one put")
            seen.add(key)
        if not valid:
            return 0
        entry = Entry(Action.SCHEDULE_PUT_MANY, job, details={"given": len(valid)})
        async with self._recorded(entry) as conn:
            written = await self._put(conn, job, valid)
            entry.details["written"] = written
        return written

    def _calendars_of(self, job: str) -> Mapping[str, Calendar] | None:
        """The calendars a schedule of ``job`` may name: its scheduler's (None: this caller
        does not register the job in code, and cannot tell which exist)."""
        spec = self._jobs().get(job)
        return None if spec is None else spec.calendars

    async def _put(self, conn: Conn, job: str, valid: list[ValidSchedule]) -> int:
        await self._dynamic_job(conn, job)
        now = await self._store.now(conn)
        rows = ScheduleRows(
            kinds=[v.scope.kind for v in valid],
            ids=[v.scope.id for v in valid],
            every_us=[None if v.every is None else v.every // US for v in valid],
            crons=[v.cron for v in valid],
            tzs=[v.timezone for v in valid],
            calendars=[v.calendar for v in valid],
            on_excluded=[v.on_excluded for v in valid],
            payloads=[v.payload_json for v in valid],
            starts=[v.starts_at for v in valid],
            ends=[v.ends_at for v in valid],
            paused=[v.paused for v in valid],
            nexts=[first_plan_after(v, now) for v in valid],
        )
        written = await self._schedules.put_schedules(conn, job, rows)
        if written >= ANALYZE_AFTER:
            await self._schedules.analyze_schedules(conn)
        await self._notify(conn, "schedules", job)
        return written

    async def get_schedule(self, job: str, scope: Scope) -> Schedule | None:
        """The stored schedule of ``scope``, or None."""
        job, scope = _target(job, scope)
        async with self._conn() as conn:
            await self._dynamic_job(conn, job)
            row = await self._schedules.get_schedule(conn, job, scope.kind, scope.id)
        return None if row is None else read_schedule(job, row)

    async def list_schedules(
        self, job: str, *, after: Scope | None = None, limit: int = 100
    ) -> list[Schedule]:
        """Up to ``limit`` (1 to 1000) schedules in (scope kind, scope id) order, starting
        after the scope ``after``: keyset pages."""
        job = check_job_name(job)
        if after is not None and not isinstance(after, Scope):
            raise ConfigError(f"job {job!r}: after={after!r} must be a pgsched.Scope")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise ConfigError(f"job {job!r}: limit={limit!r} must be an integer from 1 to 1000")
        key = None if after is None else (after.kind, after.id)
        async with self._conn() as conn:
            await self._dynamic_job(conn, job)
            rows = await self._schedules.list_schedules(conn, job, key, limit)
        return [read_schedule(job, row) for row in rows]

    async def delete_schedule(self, job: str, scope: Scope) -> bool:
        """Delete the schedule (its executions stay); False when there was none."""
        job, scope = _target(job, scope)
        entry = Entry(Action.SCHEDULE_DELETE, job, str(scope))
        async with self._recorded(entry) as conn:
            await self._dynamic_job(conn, job)
            deleted = await self._schedules.delete_schedule(conn, job, scope.kind, scope.id)
            if deleted:
                await self._notify(conn, "schedules", job)
            entry.details["deleted"] = deleted
        return deleted

    async def pause_schedule(self, job: str, scope: Scope) -> None:
        """No plan of the schedule is claimed until :meth:`resume_schedule`."""
        await self._set_schedule_paused(job, scope, True)

    async def resume_schedule(self, job: str, scope: Scope) -> None:
        """Undo :meth:`pause_schedule`. Plans that fell due while the schedule was paused do
        not run: they are recorded as skipped, reason ``paused``."""
        await self._set_schedule_paused(job, scope, False)

    async def _set_schedule_paused(self, job: str, scope: Scope, paused: bool) -> None:
        job, scope = _target(job, scope)
        name = Action.SCHEDULE_PAUSE if paused else Action.SCHEDULE_RESUME
        async with self._recorded(Entry(name, job, str(scope))) as conn:
            await self._dynamic_job(conn, job)
            if not await self._schedules.set_schedule_paused(
                conn, job, scope.kind, scope.id, paused
            ):
                raise NotFoundError(f"job {job!r}, scope {scope}: no such schedule")
            await self._notify(conn, "schedules", job)

    async def _backfill_dynamic(
        self,
        spec: JobSpec,
        lo: datetime,
        hi: datetime,
        scopes: Iterable[Scope] | None,
        entry: Entry,
    ) -> int:
        """Backfill of a dynamic job: the plans of each given scope's own schedule."""
        if scopes is None:
            raise ConfigError(f"job {spec.name!r}: a dynamic job's backfill needs its scopes")
        kinds: list[str] = []
        ids: list[str] = []
        plans: list[datetime] = []
        async with self._recorded(entry) as conn:
            for scope in scopes:
                _target(spec.name, scope)
                row = await self._schedules.get_schedule(conn, spec.name, scope.kind, scope.id)
                if row is None:
                    raise NotFoundError(f"job {spec.name!r}, scope {scope}: no such schedule")
                got = plans_between(
                    stored_schedule(spec.name, row, spec.calendars),
                    lo - US,
                    hi,
                    MAX_BACKFILL_PLANS,
                )
                kinds += [scope.kind] * len(got)
                ids += [scope.id] * len(got)
                plans += got
            count = await self._store.backfill(
                conn, spec.name, kinds, ids, plans, spec.max_attempts, pairs=True
            )
            await self._notify(conn, "backfill", spec.name)
            entry.details["inserted"] = count
        return count

    async def _dynamic_job(self, conn: Conn, job: str) -> None:
        """Refuse a job that is not dynamic: for a Scheduler, one it has not registered as
        dynamic (ConfigError); otherwise one replicas registered as not dynamic
        (ConfigError) or that no replica has registered (NotFoundError)."""
        spec = self._jobs().get(job)
        if spec is not None or self._knows_jobs:
            if spec is None or not spec.dynamic:
                raise ConfigError(f"job {job!r} is not registered as dynamic (dynamic=True)")
            return
        schedule = await self._store.job_schedule(conn, job)
        if not schedule:  # never registered (or only paused) by an operator
            raise NotFoundError(f"unknown job {job!r}: no replica has registered it")
        if schedule != "dynamic":
            raise ConfigError(f"job {job!r} is not dynamic: its schedule is {schedule}")


def check_payload(valid: ValidSchedule) -> ValidSchedule:
    """``valid``, once its payload passes the rules of its job when pgsched has some for it
    (the dynamic job ``celery``: a task to send); else a ConfigError naming the field."""
    check = PAYLOAD_CHECKS.get(valid.job)
    if check is not None:
        try:
            check(valid.payload)
        except PayloadError as exc:
            raise ConfigError(f"job {valid.job!r}, scope {valid.scope}: {exc}") from None
    return valid


def _target(job: str, scope: object) -> tuple[str, Scope]:
    job = check_job_name(job)
    if not isinstance(scope, Scope):
        raise ConfigError(f"job {job!r}: scope={scope!r} must be a pgsched.Scope")
    return job, scope
