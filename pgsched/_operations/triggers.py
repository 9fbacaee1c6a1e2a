"""Manual runs: the scopes a trigger may name, whether its instant is a scheduled plan, and
what a plan that already exists means for it. A job's scopes and plans come from its code
when the caller registered the job, else from what its replicas recorded (``job_state``: the
scopes mode, the recurrence, the plans of the next 30 s; the scopes planned in the day up to
its latest scheduled plan; a dynamic job's schedules): an operator without the APP is checked
against what the replicas run.

A manual row never takes the key (job, scope, plan_time) of a scheduled plan a claim may still
take: the claim would count it as taken by another claim and move on, so cancelling or
failing the manual row would lose the scheduled run. A trigger at such an instant adds
nothing (the scheduled run covers it), and a run-now never lands on one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime

from .._errors import ConfigError, FieldError, NotFoundError, PgschedError
from .._jobs.spec import JobSpec, evaluate_scopes, scopes_mode
from .._planning.recurrence import Recurrence, is_plan, recurrence_from_record
from .._planning.schedules import NO_CALENDARS, ValidSchedule, plans_between, stored_schedule
from .._planning.skips import described_recurrence
from .._records import JobRecord
from .._storage.schedules import ScheduleStore
from .._storage.statements import Conn
from .._storage.store import Store
from .._structures import GLOBAL, Scope, Triggered
from .._times import US

_MOST_STEPS = 1000  # microseconds a run-now moves at most off scheduled plans
ENDED_STATUSES = ("SUCCESS", "FAILED", "CANCELLED")


class TriggerScopes:
    """The scopes one trigger queues runs for (``scope``, or ``all_scopes``), validated."""

    def __init__(self, store: Store, conn: Conn, job: str, spec: JobSpec | None) -> None:
        self._store, self._conn, self._job, self._spec = store, conn, job, spec

    async def resolve(self, scope: Scope | None, all_scopes: bool) -> list[Scope]:
        job = self._job
        if scope is not None and not isinstance(scope, Scope):
            raise ConfigError(f"job {job!r}: scope={scope!r} must be a pgsched.Scope")
        if not isinstance(all_scopes, bool):
            raise ConfigError(f"job {job!r}: all_scopes={all_scopes!r} must be True or False")
        mode = await self._mode()
        if all_scopes:
            if scope is not None:
                raise FieldError(
                    f"job {job!r}: give one scope ({{scope}}) or all ({{all_scopes}}), not both",
                    {"scope": scope, "all_scopes": True},
                )
            return await self._all(mode)
        if scope is None:
            if mode in ("global", None):
                return [GLOBAL]
            raise FieldError(
                f"job {job!r} runs for {_DESCRIBED[mode]}: name one ({{scope}}) "
                "or trigger every one ({all_scopes})",
                {"scope": Scope("KIND", "ID"), "all_scopes": True},
            )
        await self._check(scope, mode)
        return [scope]

    async def _mode(self) -> str | None:
        if self._spec is not None:
            return scopes_mode(self._spec)
        return await self._store.job_scopes_mode(self._conn, self._job)

    async def _all(self, mode: str | None) -> list[Scope]:
        if mode == "global":
            return [GLOBAL]
        if self._spec is not None and mode != "dynamic":
            now = await self._store.now(self._conn)
            return list(await evaluate_scopes(self._spec, now))
        found = await self._store.known_scopes(self._conn, self._job, dynamic=mode == "dynamic")
        if mode is None:  # no replica of this version said: the scopes it planned, or GLOBAL
            return found or [GLOBAL]
        if not found:
            raise ConfigError(f"job {self._job!r} has no scopes now: {_NONE[mode]}")
        return found

    async def _check(self, scope: Scope, mode: str | None) -> None:
        if mode is None:  # recorded by no replica of this version: nothing to check against
            return
        if mode == "global":
            known = scope == GLOBAL
        elif self._spec is not None and mode != "dynamic":
            now = await self._store.now(self._conn)
            known = scope in await evaluate_scopes(self._spec, now)
        else:
            dynamic = mode == "dynamic"
            found = await self._store.known_scopes(
                self._conn, self._job, dynamic=dynamic, only=scope
            )
            known = bool(found)
        if not known:
            raise ConfigError(
                f"job {self._job!r}: scope {scope} is not one of its scopes "
                f"({_DESCRIBED[mode]}{_WHY[mode] if self._spec is None else ''})"
            )


@dataclasses.dataclass(frozen=True)
class Triggering:
    """One trigger of ``job`` (``spec``: its code, when the caller registers it): its scopes,
    then per scope either the scheduled plan that covers its instant or a PENDING manual row
    (or the row that holds it back), with the warnings the caller should see."""

    store: Store
    schedules: ScheduleStore
    conn: Conn
    job: str
    spec: JobSpec | None

    async def queue(
        self, scope: Scope | None, at: datetime | None, all_scopes: bool
    ) -> list[Triggered]:
        job, spec, store, conn = self.job, self.spec, self.store, self.conn
        record = await store.job_record(conn, job)
        if spec is None and not record.known:
            raise NotFoundError(f"unknown job {job!r}: no replica has registered it")
        chosen = await TriggerScopes(store, conn, job, spec).resolve(scope, all_scopes)
        plans = ScheduledPlans(self, record)
        attempts = spec.max_attempts if spec is not None else record.max_attempts or 1
        warnings = trigger_warnings(job, at, record)
        rows = []
        for one in chosen:
            row = await plans.covering(one, at) if at is not None else None
            if row is None:
                plan = at if at is not None else await plans.off_plan(one, record.now)
                run_now = at is None or at <= record.now
                row = await store.trigger(
                    conn, job, one, plan, run_now=run_now, max_attempts=attempts
                )
            rows.append(_amended(row, row.scheduled_plan, warnings))
        check_not_ended(job, at, rows)  # raising rolls every row of this call back
        return rows


def trigger_warnings(job: str, at: datetime | None, record: JobRecord) -> tuple[str, ...]:
    """What a trigger that is accepted says: no live replica runs the job (the run waits for
    one), or its instant is already past."""
    found = []
    if not record.live:
        found.append(f"job {job!r}: no live replica runs it; the run waits until one does")
    if at is not None and at < record.now:
        found.append(
            f"job {job!r}: {at.isoformat()} is in the past"
            f" (the database's clock reads {record.now.isoformat()}); it is due at once"
        )
    return tuple(found)


class ScheduledPlans:
    """Which instants are scheduled plans of a job's scopes that a claim may still take: from
    the job's code, else the recurrence its replicas recorded (a planner hook's only as far as
    the plans of the next 30 s they recorded), or a dynamic job's stored schedule."""

    def __init__(self, trigger: Triggering, record: JobRecord) -> None:
        spec = trigger.spec
        self._store, self._schedules, self._conn = trigger.store, trigger.schedules, trigger.conn
        self._job = trigger.job
        self._dynamic = spec.dynamic if spec is not None else record.scopes == "dynamic"
        self._calendars = spec.calendars if spec is not None else NO_CALENDARS
        self._recurrence: Recurrence | None = (
            spec.recurrence
            if spec is not None
            # a replica of an earlier version recorded only the text status shows
            else recurrence_from_record(record.recurrence) or described_recurrence(record.schedule)
        )
        # Only a planner hook's plans are unknown without its code; a job nothing was recorded
        # for (no replica of this version has run it) has no plan known to protect.
        self._hook = spec is None and (record.schedule or "").startswith("planner=")
        self._upcoming = record.upcoming or []

    async def covering(self, scope: Scope, at: datetime) -> Triggered | None:
        """When ``at`` is a scheduled plan of ``scope`` that has run or may still be claimed:
        the result that says so (its execution once it has one), else None. A plan the
        scope's cursor has moved past without running it (skipped) is no claim's any more: a
        manual run may take it."""
        if self._dynamic:
            return await self._covering_schedule(scope, at)
        plan = self._is_plan(at)
        if plan is False:
            return None
        ran = await self._store.scheduled_row(self._conn, self._job, scope, at)
        if ran is not None:
            return _amended(ran, True, ())
        cursor = await self._store.scope_cursor(self._conn, self._job, scope)
        if cursor is not None and cursor.settled and _past(cursor.next_plan_time, at):
            return None
        if plan is None:
            raise ConfigError(
                f"job {self._job!r}: whether {at.isoformat()} is one of its scheduled plans is"
                " known only to its code (a planner hook): trigger it from the Scheduler that"
                " registers it, or run it now without `at`"
            )
        return _covered(scope, at)

    async def off_plan(self, scope: Scope, now: datetime) -> datetime:
        """A run-now's plan time: ``now``, or the first microsecond after it that is no
        scheduled plan of ``scope`` (a run-now exactly on one would take its key)."""
        valid: ValidSchedule | None = None
        if self._dynamic:
            row = await self._schedules.get_schedule(self._conn, self._job, scope.kind, scope.id)
            if row is None:
                return now
            valid = stored_schedule(self._job, row, self._calendars)
            if valid.calendar is not None and valid.named is None:
                # Its calendar is unknown here: the plans it filters are a superset of its
                # own (a move onto this very microsecond aside), so `now` avoids them all.
                valid = dataclasses.replace(valid, calendar=None, on_excluded="skip")
        elif self._recurrence is None:
            return now
        plan = now
        for _ in range(_MOST_STEPS):  # a cadence of a microsecond leaves no instant free
            if not self._on_plan(valid, plan):
                break
            plan += US
        return plan

    def _on_plan(self, valid: ValidSchedule | None, at: datetime) -> bool:
        """Whether ``at`` is a plan of the schedule ``valid``, or of the job's recurrence."""
        if valid is not None:
            return plans_between(valid, at - US, at, 1) == [at]
        return self._recurrence is not None and is_plan(self._recurrence, at)

    def _is_plan(self, at: datetime) -> bool | None:
        """Whether ``at`` is a plan of the job's recurrence; None when that is unknown."""
        if self._recurrence is not None:
            return is_plan(self._recurrence, at)
        if at in self._upcoming:
            return True
        if self._upcoming and self._upcoming[0] <= at <= self._upcoming[-1]:
            return False  # within what the replicas listed, and not listed
        return None if self._hook else False

    async def _covering_schedule(self, scope: Scope, at: datetime) -> Triggered | None:
        row = await self._schedules.get_schedule(self._conn, self._job, scope.kind, scope.id)
        if row is None:
            return None
        if not self._on_plan(stored_schedule(self._job, row, self._calendars), at):
            return None
        ran = await self._store.scheduled_row(self._conn, self._job, scope, at)
        if ran is not None:
            return _amended(ran, True, ())
        if _past(row["next_plan_time"], at):
            return None
        return _covered(scope, at)


def _amended(row: Triggered, scheduled_plan: bool, warnings: tuple[str, ...]) -> Triggered:
    scope = row.scope
    return dataclasses.replace(
        row,
        scope_kind=scope.kind,
        scope_id=scope.id,
        scheduled_plan=scheduled_plan,
        warnings=warnings,
    )


def _past(next_plan: datetime | None, at: datetime) -> bool:
    """Whether a cursor whose next plan is ``next_plan`` (None: no plan left) moved past ``at``."""
    return next_plan is None or next_plan > at


def _covered(scope: Scope, at: datetime) -> Triggered:
    """The result of a trigger at a scheduled plan that has no execution yet."""
    return Triggered(None, at, None, False, scope.kind, scope.id, scheduled_plan=True)


def check_not_ended(job: str, at: datetime | None, rows: Sequence[Triggered]) -> None:
    """An explicit ``at`` names a plan: one that already ended is not queued again (a
    scheduled plan's execution is only reported: no manual row was asked to take it)."""
    if at is None:
        return
    for row in rows:
        if not row.created and not row.scheduled_plan and row.status in ENDED_STATUSES:
            raise PgschedError(
                f"job {job!r}, scope {row.scope}: the plan at {row.plan_time.isoformat()} "
                f"already ended (execution {row.id} is {row.status}); nothing was queued"
            )


_DESCRIBED = {
    "global": "the global scope only",
    "static": "the scopes listed in its code",
    "callable": "the scopes its code computes",
    "dynamic": "one scope per stored schedule",
}
_WHY = {
    "global": "",
    "static": "; checked against the scopes its replicas planned in the last day",
    "callable": "; checked against the scopes its replicas planned in the last day",
    "dynamic": ": no schedule for it",
}
_NONE = {
    "static": "its replicas have planned none yet",
    "callable": "its replicas have planned none yet",
    "dynamic": "it has no schedules",
}
