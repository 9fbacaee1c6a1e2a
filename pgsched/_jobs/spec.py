"""Job definitions: every option of ``@scheduler.job(...)`` validated eagerly."""

from __future__ import annotations

import difflib
import inspect
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypedDict, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterError

from .._errors import ConfigError
from .._planning.calendars import Calendar, CalendarRecurrence, OnExcluded, WorkingDay
from .._planning.recurrence import (
    CadenceRecurrence,
    CatchUp,
    CronRecurrence,
    DstRepeated,
    DstSkipped,
    DynamicRecurrence,
    HookRecurrence,
    PlanCursor,
    Planner,
    Recurrence,
    unique_in_order,
)
from .._structures import GLOBAL, Scope, check_job_name
from .._times import Duration, parse_duration

Handler = Callable[..., Any]
# on_failure(run, error) and on_recovery(run) (a Run, not named: job definitions stay clear of
# the driver, which Run's connection type names), sync or async (docs/hooks.md).
FailureHook = Callable[[Any, BaseException], Any]
RecoveryHook = Callable[[Any], Any]
ScopesFn = Callable[[datetime], Iterable[Scope] | Awaitable[Iterable[Scope]]]
Overlap = Literal["forbid", "allow"]
FirstSight = Literal["next", "latest"]
# A batch's plans are claimed, renewed and finished in one statement each: bounded like the
# engine's own claims.
MAX_BATCH_SIZE = 2_000
# The process-wide default of the job option first_sight (docs/reference.md).
FIRST_SIGHT_ENV = "PGSCHED_FIRST_SIGHT"


@dataclass(frozen=True, slots=True)
class RunHooks:
    """A job's (or a scheduler's, for every job) failure and recovery hooks."""

    on_failure: FailureHook | None = None
    on_recovery: RecoveryHook | None = None

    @classmethod
    def checked(cls, owner: str, on_failure: object, on_recovery: object) -> RunHooks:
        """The hooks of ``owner`` (``job 'x'`` or ``scheduler``); ConfigError unless each is
        a callable or None."""
        for field_name, value in (("on_failure", on_failure), ("on_recovery", on_recovery)):
            if value is not None and not callable(value):
                raise ConfigError(f"{owner}: {field_name}={value!r} is not callable")
        if on_failure is None and on_recovery is None:
            return NO_HOOKS
        return cls(on_failure, on_recovery)  # type: ignore[arg-type]


NO_HOOKS = RunHooks()


@dataclass(frozen=True, eq=False)
class JobSpec:
    """A validated job. Built only through :func:`build_job`."""

    name: str
    handler: Handler
    is_async: bool
    recurrence: Recurrence  # when the job's plans fall
    static_scopes: tuple[Scope, ...] | None
    scopes_fn: ScopesFn | None
    catch_up: CatchUp
    catch_up_window: timedelta
    max_plans_per_tick: int
    max_lateness: timedelta | None
    schedule_delay: timedelta
    overlap: Overlap
    jitter: timedelta
    run_timeout: timedelta
    stale_timeout: timedelta
    heartbeat_interval: timedelta
    allow_stale_reentry: bool
    max_attempts: int
    retry_backoff: tuple[timedelta, ...]
    max_running: int | None
    priority: int
    transactional: bool = False
    # The handler takes a Batch of up to this many runs (None: one Run per call).
    batch_size: int | None = None
    dynamic: bool = False  # each scope has a stored schedule of its own (docs/schedules.md)
    first_sight: FirstSight = "next"  # a new scope's first plan: the next one, or the latest due
    hooks: RunHooks = NO_HOOKS  # on_failure / on_recovery
    options: dict[str, Any] = field(default_factory=dict)
    # The calendars its scheduler names, which a dynamic job's schedules refer to by name.
    calendars: Mapping[str, Calendar] = field(default_factory=dict)

    def new_cursor(self) -> PlanCursor:
        return PlanCursor(
            self.recurrence,
            catch_up=self.catch_up,
            schedule_delay=self.schedule_delay,
            catch_up_window=self.catch_up_window,
            max_lateness=self.max_lateness,
        )

    def retry_delay(self, attempt: int, max_attempts: int) -> timedelta | None:
        """Delay before the attempt after ``attempt``, or None when no attempt is left."""
        if attempt >= max_attempts:
            return None
        if not self.retry_backoff:
            return timedelta(0)
        return self.retry_backoff[min(attempt - 1, len(self.retry_backoff) - 1)]


class JobOptions(TypedDict, total=False):
    """The options of a code-defined job: the keywords of ``Scheduler.job`` and
    ``Scheduler.register``, each checked when the job is registered (a bad or unknown one
    raises :class:`ConfigError` naming the job, the option and the value, and the option
    meant when there is one: the nearest name, or pgsched's name for another scheduler's,
    as ``retries`` for ``max_attempts``). This is their one description.

    Durations take a ``timedelta``, a number of seconds, or a string such as ``"90s"``,
    ``"5m"``, ``"1h30m"``, ``"1d"``. Exactly one of ``every``, ``cron`` and ``planner`` (or
    ``dynamic=True``). The default follows each option's name in its description.
    """

    name: str | None
    """(the function's name) The job's name, unique per scheduler: a non-empty string of at
    most 200 bytes of UTF-8 without control characters."""
    every: Duration | None
    """A fixed cadence: plans are multiples of it since the Unix epoch (UTC)."""
    cron: str | None
    """A 5-field cron expression read as crontab(5) reads it, in ``timezone``."""
    planner: Planner | None
    """An object whose ``plans_between(start, end)`` returns the aware plan instants in
    ``(start, end]``, ascending."""
    timezone: str
    """(``"UTC"``) The IANA zone a cron expression, ``working_day()``'s wall time and a move
    of ``on_excluded`` are read in, and a ``calendar``'s zone when it has none."""
    calendar: Calendar | None
    """(None) A ``pgsched.Calendar``: plans on a day it excludes (in its zone) are handled
    as ``on_excluded`` says. Part of the job's identity: changing it re-plans the future."""
    on_excluded: OnExcluded
    """(``"skip"``) A plan on an excluded day: ``"skip"`` does not run it;
    ``"next_working_day"`` / ``"previous_working_day"`` move it to that working day at the
    same wall time in ``timezone`` (plans moved onto one instant are one plan). Only with
    ``calendar``."""
    scopes: Iterable[Scope] | ScopesFn | None
    """(``[GLOBAL]``) An iterable of ``Scope(kind, id)``, or ``scopes(now)`` (sync or async)
    evaluated every tick; duplicates are dropped."""
    catch_up: CatchUp
    """(``"latest_only"``) ``"latest_only"`` claims only the newest due plan (older missed
    ones are skipped ``superseded``); ``"every_plan"`` claims every missed plan after the
    scope's latest, oldest first. Either way a scope seen for the first time starts as
    ``first_sight`` says: ``cron="0 9 * * 1-5"`` deployed at 20:47 first runs the next
    working day at 09:00; older plans run only through ``backfill``."""
    catch_up_window: Duration
    """(``"1d"``) ``every_plan`` ignores plans older than this (and looks at most at the
    newest 1000)."""
    max_plans_per_tick: int | None
    """Plans claimed per scope per tick (>= 1); required with ``every_plan``."""
    max_lateness: Duration | None
    """(None) A plan not started within this of its due time is skipped ``max_lateness``."""
    schedule_delay: Duration
    """(0) A plan falls due this long after its plan time."""
    overlap: Overlap
    """(``"forbid"``) ``"forbid"`` starts no plan of a scope while an earlier one runs with
    a live lease; ``"allow"`` does."""
    jitter: Duration
    """(0) Each (scope, plan) starts after a deterministic offset in ``[0, jitter)``."""
    dst_repeated: DstRepeated | None
    """(the DST rule) ``"first"``, ``"last"`` or ``"both"``: which instants a wall time
    repeated by fall-back fires at."""
    dst_skipped: DstSkipped | None
    """(the DST rule) ``"shift"`` (the first instant after the gap) or ``"skip"``: a wall
    time skipped by spring-forward."""
    run_timeout: Duration
    """(``"10m"``) A handler running longer is FAILED ``run_timeout``; an async one is
    cancelled, and one that blocked the event loop past it is FAILED ``run_timeout`` when it
    returns, saying so."""
    stale_timeout: Duration | None
    """(``run_timeout`` + 1 minute) A lease not renewed this long is stale; must exceed
    ``run_timeout``."""
    heartbeat_interval: Duration | None
    """(``stale_timeout / 3``, at most 30 s) How often the lease is renewed; must be below
    ``stale_timeout``."""
    allow_stale_reentry: bool | None
    """(True for ``transactional`` jobs, else False) After a crash (a lease its dead holder
    stopped renewing): True steals the lease and runs the plan again (same row, attempt + 1,
    up to ``max_attempts + 1``: the crash's attempt does not use up a retry); False ends the
    row FAILED ``stale_timeout`` and never runs the plan again."""
    max_attempts: int
    """(1) Attempts per plan, retries included (a steal after a crash may add one)."""
    retry_backoff: Sequence[Duration]
    """(``["1m"]``) The delay before attempt ``i + 2``; the last entry repeats; ``[]``
    retries at once."""
    max_running: int | None
    """(None) A cluster-wide cap on the job's running executions."""
    priority: int
    """(0) Higher claims first when slots are scarce."""
    transactional: bool
    """(False) ``run.conn`` is a transaction committed together with the SUCCESS row,
    guarded by the lease."""
    batch_size: int | None
    """(None) The handler receives a ``pgsched.Batch`` of up to this many due runs of the job
    (1 to 2,000) instead of one ``Run``; each run keeps its own row, lease, attempts,
    retries and history. A batch takes one of the replica's ``max_concurrency`` slots; it
    is claimed in one statement, renewed in one and its outcomes written in one. Mark runs
    with ``run.succeed(result)`` / ``run.fail(error)``; the unmarked ones succeed when the
    handler returns (it returns None) and fail when it raises. With ``transactional``, the
    batch and all its terminal rows are one transaction."""
    dynamic: bool
    """(False) Each scope has a schedule of its own, stored in the database
    (``put_schedule``, ``pgsched schedules put``, the HTTP API); refuses ``every``, ``cron``,
    ``planner``, ``scopes``, ``timezone`` and the DST options; every other option applies to
    each schedule; ``run.payload`` is the schedule's payload."""
    first_sight: FirstSight | None
    """(``"next"``, or ``$PGSCHED_FIRST_SIGHT``) Where a scope seen for the first time
    starts: ``"next"``, the first plan due at or after that moment (a plan due within the
    last tick interval counts); ``"latest"``, the newest plan already due, run at once. It
    happens once per scope: first sight is stored."""
    on_failure: FailureHook | None
    """(None) ``on_failure(run, error)``, sync or async, after every failed attempt, retried
    or not; ``error`` is the handler's exception or a ``RunFailed`` (``RunTimeout``,
    ``RunAbandoned``, ``StaleLease``, ``UnstorableResult``). Also a ``Scheduler`` option;
    both are called. A hook that raises is logged ``hook_failed`` and never changes the
    outcome."""
    on_recovery: RecoveryHook | None
    """(None) ``on_recovery(run)``, sync or async, at the first success after a failed
    attempt of the same job and scope."""


# Every option with its default (a unit test keeps these the keys of JobOptions).
JOB_DEFAULTS: dict[str, Any] = {
    "name": None,
    "every": None,
    "cron": None,
    "planner": None,
    "timezone": "UTC",
    "calendar": None,
    "on_excluded": "skip",
    "scopes": None,
    "catch_up": "latest_only",
    "catch_up_window": "1d",
    "max_plans_per_tick": None,
    "max_lateness": None,
    "schedule_delay": 0,
    "overlap": "forbid",
    "jitter": 0,
    "dst_repeated": None,
    "dst_skipped": None,
    "run_timeout": "10m",
    "stale_timeout": None,
    "heartbeat_interval": None,
    "allow_stale_reentry": None,  # None: True for transactional jobs, False otherwise
    "max_attempts": 1,
    "retry_backoff": ("1m",),
    "max_running": None,
    "priority": 0,
    "transactional": False,
    "batch_size": None,
    "dynamic": False,
    "first_sight": None,
    "on_failure": None,
    "on_recovery": None,
}
# What a dynamic job's stored schedules replace: giving one of these with dynamic=True is an
# error. (The DST options too: stored schedules follow the default DST rules.)
# A calendar too: a stored schedule names one of the scheduler's (Scheduler.calendar).
_NOT_DYNAMIC = ("every", "cron", "planner", "scopes", "dst_repeated", "dst_skipped", "calendar")
JOB_OPTIONS = frozenset(JOB_DEFAULTS)
# Other schedulers' names for these options (Celery, APScheduler, Airflow, Kubernetes CronJob,
# cron libraries), offered as the hint when one is given: difflib alone finds no option near
# "retries" or "tz".
_ALIASES: dict[str, tuple[str, ...]] = {
    "retries": ("max_attempts",),
    "max_retries": ("max_attempts",),
    "retry": ("max_attempts",),
    "attempts": ("max_attempts",),
    "backoff_limit": ("max_attempts",),
    "timeout": ("run_timeout",),
    "time_limit": ("run_timeout",),
    "execution_timeout": ("run_timeout",),
    "lease_timeout": ("stale_timeout",),
    "schedule": ("cron", "every"),
    "schedule_interval": ("every", "cron"),
    "interval": ("every",),
    "crontab": ("cron",),
    "trigger": ("every", "cron", "planner"),
    "tz": ("timezone",),
    "time_zone": ("timezone",),
    "zone": ("timezone",),
    "scope": ("scopes",),
    "id": ("name",),
    "retry_delay": ("retry_backoff",),
    "backoff": ("retry_backoff",),
    "catchup": ("catch_up",),
    "coalesce": ("catch_up",),
    "misfire_grace_time": ("max_lateness",),
    "starting_deadline_seconds": ("max_lateness",),
    "max_instances": ("overlap", "max_running"),
    "concurrency_policy": ("overlap",),
    "max_active_runs": ("max_running",),
    "concurrency": ("max_running",),
    "max_concurrency": ("max_running",),
}
# What an alias's value means here, when it differs from the value.
_ALIAS_NOTES = {
    "retries": "max_attempts counts the first attempt too: retries=N is max_attempts=N + 1",
    "max_retries": "max_attempts counts the first attempt too: max_retries=N is max_attempts=N + 1",
    "max_concurrency": "max_concurrency is the Scheduler's slots per replica",
}


def unknown_option_hint(option: str) -> str:
    """`` (did you mean 'x'?)`` for an unknown job option: its alias, else the nearest real
    option's name, else nothing."""
    near = _ALIASES.get(option.lower()) or tuple(
        difflib.get_close_matches(option, JOB_OPTIONS, n=1)
    )
    if not near:
        return ""
    note = _ALIAS_NOTES.get(option.lower())
    return f" (did you mean {' or '.join(map(repr, near))}?{f' {note}' if note else ''})"


def build_job(handler: Handler, **options: Any) -> JobSpec:
    """Validate every option and return the job, or raise :class:`ConfigError` naming the job,
    the field and the value; an option that does not exist is refused by name (with the
    nearest real one as a hint). Options not given take their defaults (``JOB_DEFAULTS``).

    ``stale_timeout`` defaults to ``run_timeout`` + 1 minute and ``heartbeat_interval`` to a
    third of ``stale_timeout`` (at most 30 s), which satisfies both
    ``stale_timeout > run_timeout`` and ``heartbeat_interval < stale_timeout``.
    """
    if not callable(handler):
        raise ConfigError(f"job handler {handler!r} is not callable")
    name = options.get("name")
    v = _Validator(check_job_name(name if name is not None else getattr(handler, "__name__", None)))
    unknown = sorted(set(options) - JOB_OPTIONS)
    if unknown:
        raise ConfigError(
            f"job {v.job!r}: unknown option {unknown[0]!r}{unknown_option_hint(unknown[0])}"
        )
    o = {**JOB_DEFAULTS, **options}
    dynamic = v.flag("dynamic", o["dynamic"])
    transactional = v.flag("transactional", o["transactional"])
    if dynamic:
        v.dynamic_only(o)
        static_scopes, scopes_fn = None, None
    else:
        static_scopes, scopes_fn = v.scopes(o["scopes"])
    run_timeout, stale_timeout, heartbeat = v.timeouts(o)
    return JobSpec(
        name=v.job,
        handler=handler,
        is_async=inspect.iscoroutinefunction(handler)
        or inspect.iscoroutinefunction(getattr(handler, "__call__", None)),  # noqa: B004
        recurrence=DynamicRecurrence() if dynamic else v.recurrence(o),
        static_scopes=static_scopes,
        scopes_fn=scopes_fn,
        catch_up=v.choice("catch_up", o["catch_up"], get_args(CatchUp)),
        catch_up_window=v.duration("catch_up_window", o["catch_up_window"], allow_zero=False),
        max_plans_per_tick=v.plans_per_tick(o["catch_up"], o["max_plans_per_tick"]),
        max_lateness=v.optional_duration("max_lateness", o["max_lateness"]),
        schedule_delay=v.duration("schedule_delay", o["schedule_delay"]),
        overlap=v.choice("overlap", o["overlap"], get_args(Overlap)),
        jitter=v.duration("jitter", o["jitter"]),
        run_timeout=run_timeout,
        stale_timeout=stale_timeout,
        heartbeat_interval=heartbeat,
        allow_stale_reentry=v.reentry(o["allow_stale_reentry"], transactional),
        max_attempts=v.integer("max_attempts", o["max_attempts"], 1),
        retry_backoff=v.backoff(o["retry_backoff"]),
        max_running=None
        if o["max_running"] is None
        else v.integer("max_running", o["max_running"], 1),
        priority=v.integer("priority", o["priority"], None),
        transactional=transactional,
        batch_size=v.batch_size(o["batch_size"]),
        dynamic=dynamic,
        first_sight=v.first_sight(o["first_sight"]),
        hooks=RunHooks.checked(f"job {v.job!r}", o["on_failure"], o["on_recovery"]),
    )


class _Validator:
    """Checks of one job's options, each raising :class:`ConfigError` naming the job, the
    field and the value."""

    def __init__(self, job: str) -> None:
        self.job = job

    def bad(self, field: str, value: object, why: str) -> ConfigError:
        return ConfigError(f"job {self.job!r}: {field}={value!r} {why}")

    def duration(self, field: str, value: object, allow_zero: bool = True) -> timedelta:
        return parse_duration(value, field=field, job=self.job, allow_zero=allow_zero)

    def optional_duration(self, field: str, value: object) -> timedelta | None:
        return None if value is None else self.duration(field, value)

    def integer(self, field: str, value: object, minimum: int | None) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.bad(field, value, "must be an integer")
        if minimum is not None and value < minimum:
            raise self.bad(field, value, f"must be an integer >= {minimum}")
        return value

    def flag(self, field: str, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.bad(field, value, "must be True or False")
        return value

    def reentry(self, value: object, transactional: bool) -> bool:
        """``allow_stale_reentry``; by default a transactional job's dead run committed
        nothing, so running it again is safe, and another job's may have done its work."""
        return transactional if value is None else self.flag("allow_stale_reentry", value)

    def choice(self, field: str, value: object, allowed: tuple[str | None, ...]) -> Any:
        if value not in allowed:
            raise self.bad(field, value, f"must be one of {', '.join(map(repr, allowed))}")
        return value

    def dynamic_only(self, o: dict[str, Any]) -> None:
        """A dynamic job takes its schedules from the database: refuse a schedule in code."""
        for name in _NOT_DYNAMIC:
            if o[name] is not None:
                raise self.bad(name, o[name], "cannot be given with dynamic=True")
        if o["on_excluded"] != JOB_DEFAULTS["on_excluded"]:
            raise self.bad("on_excluded", o["on_excluded"], "cannot be given with dynamic=True")
        if o["timezone"] != "UTC":
            why = "cannot be given with dynamic=True (each schedule has its own)"
            raise self.bad("timezone", o["timezone"], why)

    def recurrence(self, o: dict[str, Any]) -> Recurrence:
        given = [k for k in ("every", "cron", "planner") if o[k] is not None]
        if len(given) != 1:
            raise ConfigError(
                f"job {self.job!r}: exactly one of every=, cron= or planner= is required"
                + (f" (got {', '.join(given)})" if given else "")
            )
        try:
            tz = ZoneInfo(o["timezone"])
        except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):  # "America": a directory
            raise self.bad("timezone", o["timezone"], "is not a known IANA time zone") from None
        repeated = self.choice("dst_repeated", o["dst_repeated"], (*get_args(DstRepeated), None))
        skipped = self.choice("dst_skipped", o["dst_skipped"], (*get_args(DstSkipped), None))
        if o["every"] is not None:
            every = self.duration("every", o["every"], allow_zero=False)
            return self.calendar(o, CadenceRecurrence(every), tz)
        if o["cron"] is not None:
            return self.calendar(o, self.cron(o["cron"], tz, repeated, skipped), tz)
        planner = o["planner"]
        bind = getattr(planner, "in_job_timezone", None)
        if callable(bind):  # a planner that wants the job's zone (working_day) is told it
            planner = bind(tz)
        if isinstance(planner, WorkingDay):  # pgsched's own: keyed by what it plans
            return self.calendar(o, planner, tz)
        if not isinstance(planner, Planner):
            raise self.bad("planner", planner, "must have a plans_between(start, end) method")
        return self.calendar(o, HookRecurrence(planner), tz)

    def calendar(self, o: dict[str, Any], inner: Recurrence, tz: ZoneInfo) -> Recurrence:
        """``inner`` on the job's calendar, if it has one."""
        on_excluded = self.choice("on_excluded", o["on_excluded"], get_args(OnExcluded))
        if o["calendar"] is None:
            if on_excluded != JOB_DEFAULTS["on_excluded"]:
                raise self.bad("on_excluded", on_excluded, "needs calendar=")
            return inner
        if not isinstance(o["calendar"], Calendar):
            raise self.bad("calendar", o["calendar"], "must be a pgsched.Calendar")
        return CalendarRecurrence(inner, o["calendar"], on_excluded, tz)

    def cron(
        self, expr: object, tz: ZoneInfo, repeated: DstRepeated | None, skipped: DstSkipped | None
    ) -> CronRecurrence:
        if not isinstance(expr, str):
            raise self.bad("cron", expr, "must be a string")
        try:
            schedule = CronRecurrence(expr, tz, repeated, skipped)
        except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
            raise self.bad("cron", expr, f"is not a valid cron expression: {exc}") from None
        if schedule.next_after(datetime.now(UTC)) is None:
            raise self.bad("cron", expr, "never fires")
        return schedule

    def scopes(self, scopes: object) -> tuple[tuple[Scope, ...] | None, ScopesFn | None]:
        if scopes is None:
            return (GLOBAL,), None
        if callable(scopes):
            return None, scopes
        try:
            items = list(scopes)  # type: ignore[call-overload]
        except TypeError:
            raise self.bad(
                "scopes", scopes, "must be Scopes, or a callable returning them"
            ) from None
        if any(not isinstance(s, Scope) for s in items):
            raise self.bad("scopes", scopes, "must contain only pgsched.Scope values")
        return tuple(unique_in_order(items)), None

    def first_sight(self, value: object) -> FirstSight:
        """The option, else the process-wide default, else ``"next"``."""
        given = value or os.environ.get(FIRST_SIGHT_ENV) or "next"
        chosen: FirstSight = self.choice("first_sight", given, get_args(FirstSight))
        return chosen

    def batch_size(self, value: object) -> int | None:
        if value is None:
            return None
        size = self.integer("batch_size", value, 1)
        if size > MAX_BATCH_SIZE:
            raise self.bad("batch_size", value, f"must be at most {MAX_BATCH_SIZE:,}")
        return size

    def plans_per_tick(self, catch_up: object, value: object) -> int:
        if catch_up == "every_plan" and value is None:
            raise self.bad("max_plans_per_tick", None, "is required with catch_up='every_plan'")
        return 1 if value is None else self.integer("max_plans_per_tick", value, 1)

    def timeouts(self, o: dict[str, Any]) -> tuple[timedelta, timedelta, timedelta]:
        run_to = self.duration("run_timeout", o["run_timeout"], allow_zero=False)
        given = o["stale_timeout"]
        stale_to = (
            run_to + timedelta(minutes=1)
            if given is None
            else self.duration("stale_timeout", given, allow_zero=False)
        )
        if stale_to <= run_to:
            raise self.bad("stale_timeout", given, f"must be longer than run_timeout ({run_to})")
        beat_given = o["heartbeat_interval"]
        beat = (
            min(stale_to / 3, timedelta(seconds=30))
            if beat_given is None
            else self.duration("heartbeat_interval", beat_given, allow_zero=False)
        )
        if beat >= stale_to:
            why = f"must be shorter than stale_timeout ({stale_to})"
            raise self.bad("heartbeat_interval", beat_given, why)
        return run_to, stale_to, beat

    def backoff(self, value: object) -> tuple[timedelta, ...]:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise self.bad("retry_backoff", value, "must be a list of durations")
        return tuple(self.duration(f"retry_backoff[{i}]", d) for i, d in enumerate(value))


async def evaluate_scopes(spec: JobSpec, now: datetime) -> tuple[Scope, ...] | list[Scope]:
    """The job's scopes at ``now``: the static ones, or the callable's answer (sync or async),
    checked and de-duplicated in order."""
    if spec.static_scopes is not None:
        return spec.static_scopes
    assert spec.scopes_fn is not None
    value = spec.scopes_fn(now)
    if inspect.isawaitable(value):
        value = await value
    out = []
    for item in value:
        if not isinstance(item, Scope):
            raise ConfigError(f"job {spec.name!r}: scopes returned {item!r}, not a pgsched.Scope")
        out.append(item)
    return unique_in_order(out)


def scopes_mode(spec: JobSpec) -> str:
    """What the job runs for, as replicas record it for operators without the APP:
    ``global`` (GLOBAL only), ``static`` (other scopes listed in code), ``callable`` (scopes
    computed in code) or ``dynamic`` (one per stored schedule)."""
    if spec.dynamic:
        return "dynamic"
    if spec.static_scopes is None:
        return "callable"
    return "global" if spec.static_scopes == (GLOBAL,) else "static"
