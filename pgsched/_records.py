"""The records the storage layer's statements take and give back: plain values, no I/O, so
the pure layers (planning) and the engine build and read them without importing storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from uuid import UUID

from ._structures import Scope

Row = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Probe:
    now: datetime
    paused: frozenset[str]
    stale_jobs: frozenset[str]  # jobs with a RUNNING row past its stale_after
    retry: frozenset[str]
    pending: frozenset[str]
    # Each job's earliest due cursor: a code-defined job's cursors, a dynamic job's stored
    # schedules (None: none is due ever).
    next_due: dict[str, datetime | None] = field(default_factory=dict)
    replicas: tuple[str, ...] = ()  # the live replicas' runner ids, in order

    def cursors_due(self, job: str, delay: timedelta) -> bool:
        """True when a cursor (or schedule) of ``job`` has a plan due at the probe's now."""
        nxt = self.next_due.get(job)
        return nxt is not None and nxt + delay <= self.now


# How far past a tick's database clock its statements look for RUNNING rows (see
# running_before): an hour, so a probe leaves out the ledger's partitions of later plans
# (made days ahead) and a new primary whose clock runs behind the old one's (by less than
# this) still finds the rows the old one claimed.
RUNNING_HORIZON = timedelta(hours=1)


def running_before(clock: datetime | None) -> datetime | None:
    """The bound on the plan times of RUNNING rows for statements run after a tick read the
    database's ``clock``: no such row is planned later than the clock when it started. None
    (no clock yet): no bound."""
    return None if clock is None else clock + RUNNING_HORIZON


@dataclass(frozen=True, slots=True)
class ClaimTerms:
    """What every claim of one job by one replica shares, and the tick's database clock."""

    job: str
    runner: str
    stale_timeout: timedelta
    reentry: bool  # allow_stale_reentry
    forbid: bool  # overlap="forbid"
    max_attempts: int
    dynamic: bool = False  # its scopes' next plans are stored schedules, not cursors
    clock: datetime | None = None  # the tick's: probes of RUNNING rows are bounded by it

    def params(self) -> dict[str, Any]:
        return {
            "running_before": running_before(self.clock),
            "job": self.job,
            "runner": self.runner,
            "stale_timeout": self.stale_timeout,
            "reentry": self.reentry,
            "forbid": self.forbid,
            "max_attempts": self.max_attempts,
            "dynamic": self.dynamic,
        }


class DueCursor(NamedTuple):
    """A code-defined job's due cursor as a claim reads it (locked), with the database's
    clock at the read. A tuple: a claim reads thousands, and a dict row costs per column."""

    scope_kind: str
    scope_id: str
    next_plan_time: datetime | None
    spec: str | None  # what next_plan_time was computed from (the job's spec key)
    first_seen_at: datetime
    last_plan_time: datetime | None
    now: datetime
    # Where the row is (its ctid): the claim moves the cursor there, under the row lock the
    # read took, rather than looking it up again among the job's cursors.
    tid: str = ""
    # When the job was last paused and resumed (job_state): plans due in between are skipped.
    paused_at: datetime | None = None
    resumed_at: datetime | None = None
    job: str = ""  # the cursor's job, in a joint claim's read of several jobs' cursors


class DueSchedule(NamedTuple):
    """A dynamic job's due schedule as a claim reads it (locked), with the database's clock
    at the read: its spec, window and first unclaimed plan."""

    scope_kind: str
    scope_id: str
    every_us: int | None
    cron: str | None
    timezone: str
    starts_at: datetime | None
    ends_at: datetime | None
    next_plan_time: datetime
    now: datetime
    tid: str = ""  # where the row is, as DueCursor's
    paused_at: datetime | None = None  # the job's last pause and resume, as DueCursor's
    resumed_at: datetime | None = None
    own_paused_at: datetime | None = None  # the schedule's own
    own_resumed_at: datetime | None = None
    calendar: str | None = None  # the name of its calendar, and what an excluded plan does
    on_excluded: str = "skip"
    created_at: datetime | None = None


class Skip(NamedTuple):
    """A span of consecutive plans of one scope a claim decided not to run, for one reason
    (``superseded``, ``max_lateness``, ``paused``, ``outside_window``): its first and last
    plans, how many (counted up to a cap) and the scope's plan before the first (None: none),
    which lets the claim extend the span recorded before it."""

    kind: str
    id: str
    reason: str
    first: datetime
    last: datetime
    plans: int
    previous: datetime | None


class WonPlan(NamedTuple):
    """A plan a claim of due cursors or schedules inserted: RUNNING (first attempt) under a
    new lease, with the schedule's payload (a dynamic job's)."""

    id: UUID
    scope_kind: str
    scope_id: str
    plan_time: datetime
    lease_token: UUID
    fencing_token: int
    started_at: datetime
    payload: dict[str, Any] | None = None
    # The claim statement's count, on each of its rows, of the cursors (schedules) it did
    # not find where the claim read them: never expected; the claim is then rolled back.
    unmoved: int = 0
    job: str = ""  # the plan's job, in a joint claim of several jobs' cursors


@dataclass(frozen=True, slots=True)
class PartitionFigures:
    """One partition of the ledger and whether the planner has figures for its rows:
    ``unanalyzed`` when it holds rows but was never analyzed (or only while empty),
    ``outgrown`` when it has four times the pages it had when analyzed; ``rows``, the rows
    its figures count (as of that analysis)."""

    name: str
    lo: datetime
    hi: datetime
    unanalyzed: bool
    empty: bool
    outgrown: bool = False
    rows: int = 0


@dataclass(frozen=True, slots=True)
class JointTerms:
    """One job's part of a joint claim (the due cursors of several jobs in one transaction):
    what its read and its inserts need of the job."""

    job: str
    delay: timedelta  # the job's schedule_delay: its cursors are due this long after
    limit: int  # the most due cursors to read
    spec: str  # the key of the job's schedule, stored on each cursor moved
    max_attempts: int
    stale_timeout: timedelta
    forbid: bool  # overlap="forbid"


class CursorMove(NamedTuple):
    """What one claim does with a code-defined job's cursor: the plans it claims (none: the
    cursor only moves), its next unclaimed plan (None: none left) and when that is due."""

    kind: str
    id: str
    plans: tuple[datetime, ...]
    next_plan: datetime | None
    due_at: datetime | None


@dataclass(frozen=True, slots=True)
class Sighting:
    """A code-defined job's scopes as one replica sees them (first sight of new ones)."""

    kinds: list[str]
    ids: list[str]
    dues: list[datetime | None]  # each scope's first plan plus its jitter
    first: datetime | None  # the first plan of a scope seen now
    spec: str  # what the first plan was computed from
    seen_at: datetime
    runner: str  # the replica writing it
    digest: str  # of its scope list: whether the job's live replicas agree on it


class Renewal(NamedTuple):
    """A heartbeat of one lease (sorted by id: the lock order of a statement's rows)."""

    id: UUID
    token: UUID
    plan_time: datetime  # names the row's partition
    stale_timeout_s: float


class Finish(NamedTuple):
    """A terminal write for one lease."""

    id: UUID
    token: UUID
    plan_time: datetime  # names the row's partition
    status: str
    error_code: str | None
    error_msg: str | None
    rows_affected: int | None
    result_json: str | None
    duration_ms: int
    retry_delay_s: float | None
    traceback: str | None = None  # a FAILED attempt's, kept in its attempt history


@dataclass(frozen=True, slots=True)
class Restore:
    """One execution as this replica last wrote it (claimed, renewed or finished), to put
    back on a server that lacks it after a failover. ``status`` RUNNING: a lease still held."""

    id: UUID
    job: str
    scope_kind: str
    scope_id: str
    plan_time: datetime
    trigger: str
    attempt: int
    max_attempts: int
    runner_id: str
    token: UUID
    fencing_token: int
    exclusive: bool
    payload_json: str
    started_at: datetime | None
    stale_timeout_s: float
    status: str = "RUNNING"
    outcome: Finish | None = None
    next_retry_at: datetime | None = None
    stolen: bool = False  # the row was once stolen after a crash (one attempt more)


@dataclass(frozen=True, slots=True)
class ScheduleRows:
    """Validated schedules of one job, column by column, for one bulk upsert."""

    kinds: list[str]
    ids: list[str]
    every_us: list[int | None]
    crons: list[str | None]
    tzs: list[str]
    calendars: list[str | None]
    on_excluded: list[str]
    payloads: list[str]
    starts: list[datetime | None]
    ends: list[datetime | None]
    paused: list[bool]
    nexts: list[datetime | None]


class ScheduleMove(NamedTuple):
    """One due schedule's claim: the plan to run (None: none now) and its next plan after."""

    kind: str
    id: str
    plan: datetime | None
    next_plan: datetime | None


@dataclass(frozen=True, slots=True)
class Server:
    """One server as met through a connection: its identity and where it was reached."""

    system_identifier: str
    timeline: int
    address: str  # host:port, as libpq reached it

    def same(self, other: Server) -> bool:
        return (self.system_identifier, self.timeline) == (
            other.system_identifier,
            other.timeline,
        )

    def describe(self) -> dict[str, Any]:
        """The fields a log event shows (never a password: the DSN is not among them)."""
        return {
            "system_identifier": self.system_identifier,
            "timeline": self.timeline,
            "address": self.address,
        }


@dataclass(frozen=True, slots=True)
class RunFilter:
    """Which executions a list of runs shows: all of them where a field is None; plans at or
    after ``since`` and before ``until``."""

    job: str | None = None
    status: str | None = None
    scope_kind: str | None = None
    scope_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    # The keyset of the previous page's last row: (plan time, job, scope).
    after: tuple[datetime, str, Scope] | None = None

    def params(self) -> dict[str, object]:
        plan, job, scope = self.after or (None, None, None)
        return {
            "job": self.job,
            "status": self.status,
            "kind": self.scope_kind,
            "id": self.scope_id,
            "since": self.since,
            "until": self.until,
            "after_plan": plan,
            "after_job": job,
            "after_kind": None if scope is None else scope.kind,
            "after_id": None if scope is None else scope.id,
        }


@dataclass(frozen=True, slots=True)
class JobRecord:
    """What the database knows of one job when an operator triggers it: whether it has a
    ``job_state`` row (``known``), what its replicas recorded there (what it runs for, its
    recurrence's record, ``max_attempts``, the plans of the next 30 s), whether a live
    replica registers it, and the database's clock."""

    known: bool
    scopes: str | None
    schedule: str | None  # as status shows it (``describe()``), the upgrade path's record
    recurrence: Any
    max_attempts: int | None
    upcoming: list[datetime] | None
    live: bool
    now: datetime


@dataclass(frozen=True, slots=True)
class ScopeCursor:
    """Where a scope's scheduled plans stand: its next plan not yet claimed (None when none
    is left) and whether that is settled (False: the next claim computes it again, from a
    schedule that changed)."""

    next_plan_time: datetime | None
    settled: bool


class JobEntry(NamedTuple):
    """One job as a replica registers it in ``job_state``: its schedule as shown, what it
    runs for (``scopes_mode``), its recurrence's record as JSON text (None when no record
    reproduces it) and its ``max_attempts``."""

    name: str
    schedule: str
    scopes: str
    recurrence: str | None
    max_attempts: int


@dataclass(frozen=True, slots=True)
class ReplicaEntry:
    """The row a running replica keeps in ``replicas``: refreshed with its job registration."""

    runner_id: str
    host: str
    version: str
    http_address: str | None
    started_at: datetime
    expiry: timedelta  # the row is removed once not refreshed for this long
    live_for: timedelta  # the row shows the replica live this long after each refresh


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """A consumer's run of the task an execution sent, as ``record_task_attempt`` keeps it:
    who ran it, how long ago it started (seconds, so the database's clock dates it), how it
    ended (``SUCCESS`` or ``FAILED``), and why it failed."""

    runner_id: str
    elapsed: float
    status: str
    error_code: str | None = None
    error_msg: str | None = None
    traceback: str | None = None
    # The task's final outcome, which a Celery job's execution then takes as its status;
    # False for a run the consumer will retry (Celery's ``task_retry``).
    final: bool = True


@dataclass(frozen=True, slots=True)
class RecordedTask:
    """What ``record_task_attempt`` and ``settle_task`` did: the attempt's number (None for
    ``settle_task``), the execution's status after it (still RUNNING: its publish not yet
    written), and whether this set it to the task's final outcome."""

    attempt: int | None
    execution_status: str
    changed: bool


@dataclass(frozen=True, slots=True)
class PreviousTask:
    """``overlap="forbid"`` of a Celery entry: the scope's newest earlier plan whose task was
    sent, whether a consumer's final outcome of it is recorded, and the seconds left (negative
    once past) of the time its task may take from its publish."""

    execution_id: UUID
    outcome: bool
    left_s: float


@dataclass(frozen=True, slots=True)
class ActionRow:
    """One operator action as the action log keeps it (``record_action``)."""

    surface: str
    actor: str
    action: str
    job: str | None
    scope: str | None
    execution_id: UUID | None
    details: str | None  # JSON
    outcome: str  # ok, error
    detail: str | None
