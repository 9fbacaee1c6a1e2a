"""Moving off django-celery-beat (docs/celery.md): each enabled ``PeriodicTask`` copied into a
schedule of the dynamic job ``celery`` (scope ``periodic_task:<name>``), its task, arguments
and send options in the payload, its interval, crontab or clocked time as the schedule's
recurrence. The mapping is pure (:func:`task_spec`); :class:`DjangoBeatImport` reads the
tables through the storage layer and puts the schedules in one transaction. The originals
are left as they are.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

import psycopg

from .._errors import ConfigError, NotFoundError
from .._planning.payloads import CELERY_JOB
from .._planning.schedules import ValidSchedule, check_schedule, stored_schedule
from .._records import Row
from .._storage.connection import connect_options, database_error
from .._storage.django_beat import DjangoBeatStore
from .._storage.statements import Conn
from .._structures import SCHEDULE_FIELDS, ScheduleSpec, Scope
from .._times import US, format_duration
from .audit import Action, Entry
from .schedules import ScheduleOperations, check_payload

SCOPE_KIND = "periodic_task"
_PERIODS = ("days", "hours", "minutes", "seconds", "microseconds")
_OPTIONS = ("queue", "exchange", "routing_key")
Connector = Callable[[], AbstractAsyncContextManager[Conn]]


class Refused(ValueError):
    """A periodic task the import leaves out; the message says why."""


def task_scope(name: str) -> Scope:
    return Scope(SCOPE_KIND, name)


def task_spec(row: Row, now: datetime) -> ScheduleSpec:
    """The schedule of one ``django_beat_tasks`` row, read at ``now``; :class:`Refused` for
    one pgsched cannot copy faithfully (disabled, solar, a one-off recurrence...)."""
    if not row["enabled"]:
        raise Refused("disabled")
    expires: datetime | None = row["expires"]
    if expires is not None and expires <= now:
        raise Refused(f"expired at {expires.isoformat()}")
    recurrence = _recurrence(row, now)
    if row["one_off"] and "clocked" not in recurrence:
        raise Refused(
            "one_off with an interval or crontab: a schedule has no 'once, then stop';"
            " give it a clocked schedule"
        )
    starts_at = recurrence.pop("clocked", row["start_time"])
    ends_at = recurrence.pop("until", expires)
    return ScheduleSpec(
        task_scope(row["name"]),
        payload=task_payload(row),
        starts_at=starts_at,
        ends_at=ends_at if expires is None or ends_at is None else min(ends_at, expires),
        **recurrence,
    )


def _recurrence(row: Row, now: datetime) -> dict[str, Any]:
    """``every`` or ``cron`` and ``timezone``; a clocked time as a 1 us cadence whose window
    holds that instant alone (``clocked``, ``until``: the window)."""
    if row["solar_id"] is not None:
        raise Refused("a solar schedule: pgsched plans no solar events")
    if row["interval_every"] is not None:
        period = row["interval_period"]
        if period not in _PERIODS:
            raise Refused(f"interval period={period!r} is not one of {', '.join(_PERIODS)}")
        return {"every": timedelta(**{period: row["interval_every"]})}
    if row["cron_minute"] is not None:
        return {"cron": _cron(row), "timezone": str(row["cron_timezone"] or "UTC")}
    clocked: datetime | None = row["clocked_time"]
    if clocked is not None:
        if clocked <= now:
            raise Refused(f"clocked at {clocked.isoformat()}, which has passed")
        return {"every": US, "clocked": clocked, "until": clocked + US}
    raise Refused("no interval, crontab, solar or clocked schedule")


def _cron(row: Row) -> str:
    fields = [
        str(row[f"cron_{name}"]).strip() or "*"
        for name in ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
    ]
    if fields[2] != "*" and fields[4] != "*":
        # Celery fires on days matching both; cron on days matching either.
        raise Refused(
            f"crontab {' '.join(fields)!r} restricts both day_of_month and day_of_week"
            " (Celery: days matching both; cron: days matching either)"
        )
    return " ".join(fields)


def task_payload(row: Row) -> dict[str, Any]:
    """The payload the dynamic job ``celery`` sends: task, args, kwargs and the options
    django-celery-beat's own beat passes to send_task (its ``ModelEntry``)."""
    options: dict[str, Any] = {k: row[k] for k in _OPTIONS if row[k] not in (None, "")}
    if row["priority"] is not None:
        options["priority"] = row["priority"]
    if row["expires"] is not None:  # django's expires_: the instant, else the seconds
        options["expires"] = row["expires"].isoformat()
    elif row["expire_seconds"] is not None:
        options["expires"] = row["expire_seconds"]
    headers = _json(row, "headers", "{}", dict)
    options["headers"] = {**headers, "periodic_task_name": row["name"]}
    payload: dict[str, Any] = {
        "task": row["task"],
        "args": _json(row, "args", "[]", list),
        "kwargs": _json(row, "kwargs", "{}", dict),
        "options": options,
    }
    if row.get("description"):
        payload["description"] = row["description"]
    return payload


def _json(row: Row, column: str, empty: str, kind: type) -> Any:
    text = row[column] or empty
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, kind):
        what = "a JSON list" if kind is list else "a JSON object"
        raise Refused(f"{column}={text[:80]!r} is not {what}")
    return value


@dataclass(frozen=True)
class TaskImport:
    """What the import did with one periodic task."""

    name: str
    outcome: str  # imported, updated, unchanged, skipped
    detail: str  # the schedule, or why it was skipped

    def to_json(self) -> dict[str, Any]:
        scope = None if self.outcome == "skipped" else f"{SCOPE_KIND}:{self.name}"
        return {"name": self.name, "outcome": self.outcome, "detail": self.detail, "scope": scope}


@dataclass(frozen=True)
class ImportReport:
    """The outcome of one import, task by task (by name)."""

    tasks: list[TaskImport]
    dry_run: bool

    def counts(self) -> dict[str, int]:
        outcomes = ("imported", "updated", "unchanged", "skipped")
        return {o: sum(t.outcome == o for t in self.tasks) for o in outcomes}

    def to_json(self) -> dict[str, Any]:
        return {
            "job": CELERY_JOB,
            "dry_run": self.dry_run,
            "tasks": [t.to_json() for t in self.tasks],
            "summary": self.counts(),
        }


def describe(valid: ValidSchedule) -> str:
    if valid.every is None:
        recurrence = f"cron {valid.cron!r} in {valid.timezone}"
    elif valid.every == US and valid.starts_at is not None:
        recurrence = f"once at {valid.starts_at.isoformat()}"
    else:
        recurrence = f"every {format_duration(valid.every)}"
    return f"{recurrence} -> {valid.payload['task']}"


def _same(valid: ValidSchedule, stored: ValidSchedule) -> bool:
    return all(getattr(valid, f) == getattr(stored, f) for f in SCHEDULE_FIELDS)


class DjangoBeatImport(ScheduleOperations):
    """``import_django_celery_beat`` of :class:`~pgsched._operations.core.Operations`."""

    _connect: Connector

    async def import_django_celery_beat(
        self, from_dsn: str | None = None, *, dry_run: bool = False
    ) -> ImportReport:
        """Copy each enabled periodic task of the django-celery-beat tables on ``from_dsn``
        (None: this core's database; the tables are found on its search_path) into a
        schedule of the dynamic job ``celery``, all in one transaction (nothing with
        ``dry_run``). A task imported before is updated when it changed, its pause kept; a
        task refused is skipped with the reason."""
        async with self._source(from_dsn) as conn:
            try:
                rows = await DjangoBeatStore(self._store.schema).periodic_tasks(conn)
            except psycopg.errors.UndefinedTable as exc:
                raise NotFoundError(
                    "no django-celery-beat tables on the source database"
                    f" ({exc.diag.message_primary}): give its DSN, with"
                    " options=-csearch_path=SCHEMA when they are in another schema"
                ) from None
        if dry_run:  # nothing written, not even to the action log
            async with self._conn() as conn:
                return (await self._plan_import(conn, rows, dry_run))[0]
        entry = Entry(Action.CELERY_IMPORT, CELERY_JOB, details={"tasks": len(rows)})
        async with self._recorded(entry) as conn:
            report, valid = await self._plan_import(conn, rows, dry_run)
            if valid:
                try:
                    entry.details["written"] = await self._put(conn, CELERY_JOB, valid)
                except NotFoundError as exc:
                    raise NotFoundError(
                        f"{exc}: start a beat with -S pgsched (it registers the dynamic job"
                        f" {CELERY_JOB!r}), then import again"
                    ) from None
        return report

    @asynccontextmanager
    async def _source(self, from_dsn: str | None) -> AsyncIterator[Conn]:
        """A connection to the tables' database: this core's, or one of its own to
        ``from_dsn`` for the read, closed after it."""
        if from_dsn is None:
            async with self._connect() as conn:
                yield conn
            return
        options = connect_options(from_dsn, "pgsched import", transaction_pooling=False)
        try:
            conn = await psycopg.AsyncConnection.connect(from_dsn, **options)
        except psycopg.Error as exc:
            raise database_error(exc, from_dsn) from None
        async with conn:
            yield conn

    async def _plan_import(
        self, conn: Conn, rows: list[Row], dry_run: bool
    ) -> tuple[ImportReport, list[ValidSchedule]]:
        now = await self._store.now(conn)
        tasks: list[TaskImport] = []
        valid: list[ValidSchedule] = []
        for row in rows:
            name = row["name"]
            try:
                spec = task_spec(row, now)
                stored = await self._schedules.get_schedule(conn, CELERY_JOB, SCOPE_KIND, name)
                if stored is not None:  # a pause given in pgsched since stays
                    spec = replace(spec, paused=bool(stored["paused"]))
                schedule = check_payload(check_schedule(CELERY_JOB, spec))
            except (Refused, ConfigError) as exc:
                tasks.append(TaskImport(name, "skipped", str(exc)))
                continue
            if stored is None:
                outcome = "imported"
            elif _same(schedule, stored_schedule(CELERY_JOB, stored)):
                outcome = "unchanged"
            else:
                outcome = "updated"
            tasks.append(TaskImport(name, outcome, describe(schedule)))
            if outcome != "unchanged":
                valid.append(schedule)
        return ImportReport(tasks, dry_run), valid
