"""The typed values operator reads return: what ``status()``, ``runs()`` and ``trigger()`` give
back, from the database's rows (built by psycopg's ``class_row``), with the JSON form the
command line and the HTTP API print. Owns no I/O; never imports the engine.
"""

from __future__ import annotations

import dataclasses
from dataclasses import InitVar, dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from ._model import Scope


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
