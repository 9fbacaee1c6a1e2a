"""pgsched's public value types, in one module: the ledger's keys (job names and scopes),
what a handler may return, what operator reads return (status, runs, trigger, explain: built
from the database's rows by psycopg's ``class_row``, with the JSON form the command line and
the HTTP API print), a put schedule and a stored one, and a tick's report. Owns no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import InitVar, dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from ._errors import ConfigError
from ._times import Duration

Trigger = Literal["schedule", "manual", "backfill"]
MAX_SCOPE_BYTES = 1024
# Unicode category Cc, exactly: C0 controls, DEL and C1 controls. A newline or tab in a job
# name or scope reads as two names in every table, log line and URL that shows it, and NUL
# cannot be stored at all.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\x00": "NUL", "\t": "tab", "\n": "newline", "\r": "carriage return"}


def control_character(value: str) -> str | None:
    """How the first control character (category Cc) of ``value`` is called, or None."""
    found = _CONTROL.search(value)
    if found is None:
        return None
    char = found.group()
    return _CONTROL_NAMES.get(char, f"U+{ord(char):04X}")


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """What a job runs for: ``Scope("tenant", "42")``. Integer ids are stored as text."""

    kind: str
    id: str

    def __post_init__(self) -> None:
        for name in ("kind", "id"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, str(value))
            elif not isinstance(value, str):
                raise ConfigError(f"Scope {name}={value!r} must be a string")
            value = getattr(self, name)
            if value == "":
                raise ConfigError(f"Scope {name} must not be empty")
            control = control_character(value)
            if control is not None:
                shown = repr(value) if len(value) <= 80 else f"{value[:80]!r}..."
                raise ConfigError(f"Scope {name}={shown} contains a control character ({control})")
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise ConfigError(f"Scope {name}={value!r} is not valid Unicode") from None
            if size > MAX_SCOPE_BYTES:
                # The unique key (job, kind, id, plan_time) is a btree entry, whose size
                # PostgreSQL caps near 2.7 kB; two 1 kB parts and a job name fit.
                raise ConfigError(
                    f"Scope {name}={value[:40]!r}... is {size} bytes; the limit is "
                    f"{MAX_SCOPE_BYTES} bytes of UTF-8"
                )

    @classmethod
    def parse(cls, text: str, job: str | None = None, *, field: str = "scope") -> Scope:
        """Parse ``KIND:ID`` as written on the command line (the id may contain colons); an
        error names ``job`` when given, and the ``field`` that held ``text``."""
        where = "" if job is None else f"job {job!r}: "
        kind, sep, ident = text.partition(":")
        if not sep or not kind or not ident:
            raise ConfigError(f"{where}{field} {text!r} is not of the form KIND:ID")
        try:
            return cls(kind, ident)
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from None

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


GLOBAL = Scope("global", "global")


@dataclass(frozen=True, slots=True)
class Result:
    """What a handler may return: a row count and a small JSON-serialisable payload."""

    rows_affected: int = 0
    data: Any = field(default_factory=dict)


# Bytes of UTF-8: with two 1 KiB scope parts the unique key stays under PostgreSQL's btree
# entry limit (about 2.7 kB).
_NAME_MAX = 200


def check_job_name(job: object) -> str:
    """``job`` if it is a usable job name, else :class:`ConfigError`."""
    if not isinstance(job, str) or not job:
        raise ConfigError(f"job name={job!r} must be a non-empty string")
    shown = repr(job) if len(job) <= 80 else f"{job[:80]!r}... ({len(job)} characters)"
    control = control_character(job)
    if control is not None:
        raise ConfigError(f"job name={shown} contains a control character ({control})")
    try:
        size = len(job.encode())
    except UnicodeEncodeError:
        raise ConfigError(f"job name={shown} is not valid Unicode") from None
    if size > _NAME_MAX:
        raise ConfigError(f"job name={shown} is {size} bytes; the limit is {_NAME_MAX} bytes")
    return job


def _jsonable(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, Scope):
        return {"kind": value.kind, "id": value.id}
    if isinstance(value, tuple):
        return [v.to_json() if isinstance(v, _JsonView) else _jsonable(v) for v in value]
    return value


def attempt_text(attempt: int, max_attempts: int) -> str:
    """``2/3``; an attempt past ``max_attempts`` can only be on a row stolen after a crash (the
    one extra attempt a crash gives its plan), and says so: ``2/1 (+1 after a crash)``."""
    text = f"{attempt}/{max_attempts}"
    return text if attempt <= max_attempts else f"{text} (+1 after a crash)"


class _JsonView:
    """``to_json()``: the value's fields as JSON-ready values (ISO times, UUIDs as text,
    a scope as ``{"kind", "id"}``)."""

    def to_json(self) -> dict[str, Any]:
        return {
            f.name: _jsonable(getattr(self, f.name))
            for f in dataclasses.fields(self)  # type: ignore[arg-type]
        }


def trusted_scope(kind: str, ident: str) -> Scope:
    """A scope read back from the database, which only ever stored valid ones (so the
    checks of ``Scope()`` are not run again for every row read)."""
    scope = object.__new__(Scope)
    object.__setattr__(scope, "kind", kind)
    object.__setattr__(scope, "id", ident)
    return scope


@dataclass(frozen=True, slots=True)
class JobStatus(_JsonView):
    """One job as ``status()`` reports it: the replicas that registered it, its pause flag,
    its latest plan and success, and counts of its rows by state (from the database)."""

    job: str
    schedule: str | None
    paused: bool
    last_plan: datetime | None
    last_status: str | None
    last_success: datetime | None
    running: int
    stale: int
    failed: int
    pending: int
    seen_at: datetime | None
    seen_by: str | None
    # Dynamic jobs (docs/schedules.md) only, else None: schedules, how many paused, next due.
    schedules: int | None = None
    schedules_paused: int | None = None
    next_due: datetime | None = None
    # The next plan: from the schedule its replicas registered (a dynamic job: next_due).
    next_plan: datetime | None = None
    # Whether a live replica registers the job: a trigger of one none runs waits for one.
    live: bool = True


@dataclass(frozen=True, slots=True)
class LiveReplica(_JsonView):
    """One running replica as ``replicas()`` reports it: who and where it is, the jobs it
    runs, its HTTP address (None without HTTP) and when it started and last registered."""

    runner_id: str
    host: str
    version: str
    jobs: list[str]
    http_address: str | None
    started_at: datetime
    seen_at: datetime


@dataclass(frozen=True)
class Execution(_JsonView):
    """One row of ``cron_executions`` as ``runs()`` reports it; ``stale`` is true for a
    RUNNING row whose lease has expired. ``result`` is what the handler returned
    (``Result.data``; ``{}`` when nothing), ``payload`` the schedule's payload a dynamic job's
    run got (``run.payload``; None for a code-defined job)."""

    id: UUID
    job: str
    scope_kind: InitVar[str]
    scope_id: InitVar[str]
    plan_time: datetime
    trigger: str
    status: str
    attempt: int
    max_attempts: int
    next_retry_at: datetime | None
    runner_id: str | None
    fencing_token: int
    heartbeat_at: datetime | None
    stale_after: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    duration_ms: int | None
    rows_affected: int | None
    result: Any
    payload: Any
    error_code: str | None
    error_msg: str | None
    created_at: datetime
    stale: bool
    scope: Scope = field(init=False)

    def __post_init__(self, scope_kind: str, scope_id: str) -> None:
        object.__setattr__(self, "scope", trusted_scope(scope_kind, scope_id))


@dataclass(frozen=True, slots=True)
class Attempt(_JsonView):
    """One attempt of an execution: the runner that held its lease (``fencing_token``), when
    it started and ended, and how (``status`` FAILED for every attempt but the latest; a
    lease taken over is ``stale_timeout``), with the handler's ``traceback`` if it raised."""

    attempt: int
    runner_id: str | None
    fencing_token: int
    started_at: datetime | None
    finished_at: datetime | None
    status: str
    error_code: str | None
    error_msg: str | None
    traceback: str | None


@dataclass(frozen=True)
class FailedAttempt(_JsonView):
    """A failed attempt as the recent failures list it, with its execution as it is now:
    ``latest`` when it is the execution's latest attempt (then ``next_retry_at`` is its
    retry, if any), else the execution went on (``execution_status`` at
    ``execution_attempt``)."""

    execution_id: UUID
    job: str
    scope_kind: InitVar[str]
    scope_id: InitVar[str]
    plan_time: datetime
    attempt: int
    max_attempts: int
    runner_id: str | None
    finished_at: datetime | None
    error_code: str | None
    error_msg: str | None
    execution_status: str
    execution_attempt: int
    next_retry_at: datetime | None
    latest: bool
    scope: Scope = field(init=False)

    def __post_init__(self, scope_kind: str, scope_id: str) -> None:
        object.__setattr__(self, "scope", trusted_scope(scope_kind, scope_id))


@dataclass(frozen=True, slots=True)
class RunHistory:
    """One execution as ``run(id)`` reports it: its row and every attempt, in order."""

    execution: Execution
    attempts: tuple[Attempt, ...]

    def to_json(self) -> dict[str, Any]:
        """The execution's JSON with ``attempts``: a list of each attempt's JSON."""
        return {**self.execution.to_json(), "attempts": [a.to_json() for a in self.attempts]}


@dataclass(frozen=True)
class Triggered(_JsonView):
    """A manual run: its execution id, plan time, status and scope, and whether this call
    created it (False: the row that already holds the plan, or the scope's PENDING run-now,
    is returned). ``scheduled_plan``: the instant asked for is a scheduled plan of the scope,
    so nothing was added (the scheduled run covers it); ``id`` and ``status`` are then its
    execution's, None until it has one. ``warnings``: what the caller should know about a run
    that was accepted (no live replica runs the job, an instant in the past)."""

    id: UUID | None
    plan_time: datetime
    status: str | None
    created: bool
    scope_kind: InitVar[str]
    scope_id: InitVar[str]
    scope: Scope = field(init=False)
    scheduled_plan: bool = False
    warnings: tuple[str, ...] = ()

    def __post_init__(self, scope_kind: str, scope_id: str) -> None:
        object.__setattr__(self, "scope", trusted_scope(scope_kind, scope_id))


@dataclass(frozen=True, slots=True)
class PlanSummary(_JsonView):
    """One plan of a job as the dashboard shows it: how its executions stand and their start
    lag and duration (median and max, in ms), from at most a bounded sample of its rows
    (``total`` is the sample's size)."""

    plan_time: datetime
    total: int
    success: int
    failed: int
    running: int
    stale: int
    pending: int
    cancelled: int
    lag_p50_ms: int | None
    lag_max_ms: int | None
    duration_p50_ms: int | None
    duration_max_ms: int | None

    @property
    def outcome(self) -> str:
        """The plan's colour: the worst state among its executions."""
        for name, count in (
            ("FAILED", self.failed),
            ("STALE", self.stale),
            ("RUNNING", self.running),
            ("PENDING", self.pending),
            ("SUCCESS", self.success),
        ):
            if count:
                return name
        return "CANCELLED"


@dataclass(frozen=True)
class UpcomingPlan(_JsonView):
    """A plan ahead: of one schedule of a dynamic job (``scope``), or of the job's own
    schedule (``scope`` None)."""

    plan_time: datetime
    scope_kind: InitVar[str | None]
    scope_id: InitVar[str | None]
    scope: Scope | None = field(init=False)

    def __post_init__(self, scope_kind: str | None, scope_id: str | None) -> None:
        found = None if scope_kind is None else trusted_scope(scope_kind, scope_id or "")
        object.__setattr__(self, "scope", found)


@dataclass(frozen=True, slots=True)
class ActionRecord(_JsonView):
    """An operator action as recorded: when (the database's clock), through which surface
    (``cli``, ``admin``, ``async_admin``, ``http``, ``dashboard``; None on rows written
    before migration 0021) and by whom, what, on which job, scope and execution (``target`` names
    either), its details (such as a trigger's ``at``) and how it ended (``ok`` or
    ``error`` with the error in ``detail``)."""

    id: int
    at: datetime
    surface: str | None
    actor: str
    action: str
    job: str | None
    scope: str | None
    execution_id: UUID | None
    target: str | None
    details: dict[str, Any] | None
    outcome: str
    detail: str | None


@dataclass(frozen=True, slots=True)
class SkippedSpan(_JsonView):
    """A span of consecutive plans of one scope a claim decided not to run, and why."""

    scope: Scope
    reason: str
    first_plan: datetime
    last_plan: datetime
    plans: int


@dataclass(frozen=True, slots=True)
class ExplainLine(_JsonView):
    """One line of ``explain``: a plan (or consecutive plans folded) and what happened.
    ``state``: ``ran`` (its row ended: ``status``), ``running``, ``pending`` (queued),
    ``skipped`` (``reason``), ``due`` (waiting for a claim), ``not_due`` (later),
    ``unrecorded`` (no row and no span: pruned, or before spans were recorded). A whole
    job's line counts its scopes' rows by status (``statuses``) and skips (``skipped``)."""

    state: str
    first_plan: datetime
    last_plan: datetime
    plans: int = 1
    reason: str | None = None
    status: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    runner: str | None = None
    execution_id: UUID | None = None
    trigger: str | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Explanation(_JsonView):
    """``explain``'s answer for a job (and a scope, or the whole job when None) over
    ``[since, until]``: its lines oldest first, the last ``limit`` of them (``truncated``
    when older ones were left out)."""

    job: str
    scope: Scope | None
    since: datetime
    until: datetime
    now: datetime
    schedule: str | None
    lines: tuple[ExplainLine, ...]
    truncated: bool = False
    first_seen_at: datetime | None = None
    next_plan: datetime | None = None


@dataclass(frozen=True)
class ScheduleSpec:
    """One schedule as a caller puts it (``put_schedule`` / ``put_schedules``), unchecked.

    Exactly one of ``every`` (a duration: ``timedelta``, seconds, or text such as ``"1h"``)
    and ``cron`` (5-field expression, evaluated in ``timezone``). ``payload`` is a JSON
    object handed to every run as ``run.payload``. Plans satisfy
    ``starts_at <= plan_time < ends_at``; both must be timezone-aware. ``calendar`` names a
    calendar the scheduler registers (``Scheduler.calendar``): a plan on a day it excludes
    is skipped, or moved as ``on_excluded`` says (``"next_working_day"``,
    ``"previous_working_day"``), at the same wall time in ``timezone``.
    """

    scope: Scope
    every: Duration | None = None
    cron: str | None = None
    timezone: str = "UTC"
    payload: dict[str, Any] | None = None
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    paused: bool = False
    calendar: str | None = None
    on_excluded: str = "skip"


# What put_schedule takes besides the job and scope: the fields of a spec but its scope.
SCHEDULE_FIELDS = tuple(f.name for f in fields(ScheduleSpec) if f.name != "scope")


@dataclass(frozen=True)
class Schedule:
    """A stored schedule as ``get_schedule`` / ``list_schedules`` return it.

    Times are aware UTC; ``next_plan_time`` is None when no plan is left (past ``ends_at``,
    or an expression that never fires again).
    """

    job: str
    scope: Scope
    every: timedelta | None
    cron: str | None
    timezone: str
    payload: dict[str, Any]
    starts_at: datetime | None
    ends_at: datetime | None
    paused: bool
    next_plan_time: datetime | None
    created_at: datetime
    updated_at: datetime
    calendar: str | None = None
    on_excluded: str = "skip"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready fields (the command line's and the HTTP API's form): times in ISO 8601,
        ``every`` in seconds, the scope as ``{"kind", "id"}``."""

        def iso(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "job": self.job,
            "scope": {"kind": self.scope.kind, "id": self.scope.id},
            "every": None if self.every is None else self.every.total_seconds(),
            "cron": self.cron,
            "timezone": self.timezone,
            "payload": self.payload,
            "starts_at": iso(self.starts_at),
            "ends_at": iso(self.ends_at),
            "paused": self.paused,
            "calendar": self.calendar,
            "on_excluded": self.on_excluded,
            "next_plan_time": iso(self.next_plan_time),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
        }


@dataclass
class TickReport:
    """Counts of what a replica did; ``run_once()`` returns one for its tick."""

    claimed: int = 0
    stolen: int = 0
    retried: int = 0
    conflicts: int = 0
    closed_stale: int = 0
    skipped: int = 0
    succeeded: int = 0
    failed: int = 0
    leases_lost: int = 0
    lock_busy: int = 0
    errors: int = 0

    @property
    def started(self) -> int:
        """Executions this replica started (new claims, steals and retries)."""
        return self.claimed + self.stolen + self.retried
