"""Job definitions: every option of ``@scheduler.job(...)`` validated eagerly."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterError

from ._durations import Duration, parse_duration
from ._errors import ConfigError
from ._model import GLOBAL, Scope
from ._planning import (
    CadenceSchedule,
    CatchUp,
    CronSchedule,
    DstRepeated,
    DstSkipped,
    HookSchedule,
    PlanCursor,
    Planner,
    Schedule,
    unique_in_order,
)

Handler = Callable[..., Any]
ScopesFn = Callable[[datetime], Iterable[Scope] | Awaitable[Iterable[Scope]]]
Overlap = Literal["forbid", "allow"]

# Bytes of UTF-8: with two 1 KiB scope parts the unique key stays under PostgreSQL's btree
# entry limit (about 2.7 kB).
_NAME_MAX = 200


def check_job_name(job: object) -> str:
    """``job`` if it is a usable job name, else :class:`ConfigError`."""
    if not isinstance(job, str) or not job:
        raise ConfigError(f"job name={job!r} must be a non-empty string")
    shown = repr(job) if len(job) <= 80 else f"{job[:80]!r}... ({len(job)} characters)"
    if "\x00" in job:
        raise ConfigError(f"job name={shown} contains a NUL character")
    try:
        size = len(job.encode())
    except UnicodeEncodeError:
        raise ConfigError(f"job name={shown} is not valid Unicode") from None
    if size > _NAME_MAX:
        raise ConfigError(f"job name={shown} is {size} bytes; the limit is {_NAME_MAX} bytes")
    return job


@dataclass(frozen=True, eq=False)
class JobSpec:
    """A validated job. Built only through :func:`build_job`."""

    name: str
    handler: Handler
    is_async: bool
    schedule: Schedule
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
    options: dict[str, Any] = field(default_factory=dict)

    def new_cursor(self) -> PlanCursor:
        return PlanCursor(
            self.schedule,
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


def build_job(handler: Handler, **options: Any) -> JobSpec:
    """Validate every option and return the job, or raise :class:`ConfigError`; an option
    that does not exist is refused by name (with the nearest real one as a hint)."""
    unknown = sorted(set(options) - JOB_OPTIONS)
    if unknown:
        name = options.get("name") or getattr(handler, "__name__", "?")
        hint = difflib.get_close_matches(unknown[0], JOB_OPTIONS, n=1)
        raise ConfigError(
            f"job {name!r}: unknown option {unknown[0]!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    return _build_job(handler, **options)


def _build_job(
    handler: Handler,
    *,
    name: str | None = None,
    every: Duration | None = None,
    cron: str | None = None,
    planner: Planner | None = None,
    timezone: str = "UTC",
    scopes: Iterable[Scope] | ScopesFn | None = None,
    catch_up: CatchUp = "latest_only",
    catch_up_window: Duration = "1d",
    max_plans_per_tick: int | None = None,
    max_lateness: Duration | None = None,
    schedule_delay: Duration = 0,
    overlap: Overlap = "forbid",
    jitter: Duration = 0,
    dst_repeated: DstRepeated | None = None,
    dst_skipped: DstSkipped | None = None,
    run_timeout: Duration = "10m",
    stale_timeout: Duration | None = None,
    heartbeat_interval: Duration | None = None,
    allow_stale_reentry: bool = True,
    max_attempts: int = 1,
    retry_backoff: Sequence[Duration] = ("1m",),
    max_running: int | None = None,
    priority: int = 0,
    transactional: bool = False,
) -> JobSpec:
    """The job, every option validated (the options are documented on ``Scheduler.job``).

    ``stale_timeout`` defaults to ``run_timeout`` + 1 minute and ``heartbeat_interval`` to a
    third of ``stale_timeout`` (at most 30 s), which satisfies the SPEC's two inequalities.
    ``transactional=True`` gives the handler ``run.conn``, a connection inside a transaction
    that also writes the SUCCESS row: its writes commit if and only if the lease still holds.
    """
    if not callable(handler):
        raise ConfigError(f"job handler {handler!r} is not callable")
    job = check_job_name(name if name is not None else getattr(handler, "__name__", None))

    def bad(fld: str, value: object, why: str) -> ConfigError:
        return ConfigError(f"job {job!r}: {fld}={value!r} {why}")

    def dur(fld: str, value: object, allow_zero: bool = True) -> timedelta:
        return parse_duration(value, field=fld, job=job, allow_zero=allow_zero)

    def integer(fld: str, value: object, minimum: int) -> int:
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise bad(fld, value, f"must be an integer >= {minimum}")
        return value

    def choice(fld: str, value: object, allowed: tuple[str | None, ...]) -> Any:
        if value not in allowed:
            raise bad(fld, value, f"must be one of {', '.join(map(repr, allowed))}")
        return value

    given = [
        k for k, v in (("every", every), ("cron", cron), ("planner", planner)) if v is not None
    ]
    if len(given) != 1:
        raise ConfigError(
            f"job {job!r}: exactly one of every=, cron= or planner= is required"
            + (f" (got {', '.join(given)})" if given else "")
        )
    try:
        tz = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise bad("timezone", timezone, "is not a known IANA time zone") from None
    repeated = choice("dst_repeated", dst_repeated, (*get_args(DstRepeated), None))
    skipped = choice("dst_skipped", dst_skipped, (*get_args(DstSkipped), None))
    schedule: Schedule
    if every is not None:
        schedule = CadenceSchedule(dur("every", every, allow_zero=False))
    elif cron is not None:
        if not isinstance(cron, str):
            raise bad("cron", cron, "must be a string")
        try:
            schedule = CronSchedule(cron, tz, repeated, skipped)
        except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
            raise bad("cron", cron, f"is not a valid cron expression: {exc}") from None
        if schedule.next_after(datetime.now(UTC)) is None:
            raise bad("cron", cron, "never fires")
    else:
        if not isinstance(planner, Planner):
            raise bad("planner", planner, "must have a plans_between(start, end) method")
        schedule = HookSchedule(planner)

    static_scopes: tuple[Scope, ...] | None = None
    scopes_fn: ScopesFn | None = None
    if scopes is None:
        static_scopes = (GLOBAL,)
    elif callable(scopes):
        scopes_fn = scopes
    else:
        try:
            items = list(scopes)
        except TypeError:
            raise bad("scopes", scopes, "must be Scopes, or a callable returning them") from None
        if any(not isinstance(s, Scope) for s in items):
            raise bad("scopes", scopes, "must contain only pgsched.Scope values")
        static_scopes = tuple(unique_in_order(items))

    catch_up_mode: CatchUp = choice("catch_up", catch_up, get_args(CatchUp))
    if catch_up_mode == "every_plan":
        if max_plans_per_tick is None:
            raise bad("max_plans_per_tick", None, "is required with catch_up='every_plan'")
        plans_per_tick = integer("max_plans_per_tick", max_plans_per_tick, 1)
    else:
        plans_per_tick = (
            1
            if max_plans_per_tick is None
            else integer("max_plans_per_tick", max_plans_per_tick, 1)
        )

    run_to = dur("run_timeout", run_timeout, allow_zero=False)
    stale_to = (
        run_to + timedelta(minutes=1)
        if stale_timeout is None
        else dur("stale_timeout", stale_timeout, allow_zero=False)
    )
    if stale_to <= run_to:
        raise bad("stale_timeout", stale_timeout, f"must be longer than run_timeout ({run_to})")
    beat = (
        min(stale_to / 3, timedelta(seconds=30))
        if heartbeat_interval is None
        else dur("heartbeat_interval", heartbeat_interval, allow_zero=False)
    )
    if beat >= stale_to:
        raise bad(
            "heartbeat_interval",
            heartbeat_interval,
            f"must be shorter than stale_timeout ({stale_to})",
        )
    if isinstance(retry_backoff, str | bytes) or not isinstance(retry_backoff, Sequence):
        raise bad("retry_backoff", retry_backoff, "must be a list of durations")
    if not isinstance(allow_stale_reentry, bool):
        raise bad("allow_stale_reentry", allow_stale_reentry, "must be True or False")
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise bad("priority", priority, "must be an integer")
    if not isinstance(transactional, bool):
        raise bad("transactional", transactional, "must be True or False")

    return JobSpec(
        name=job,
        handler=handler,
        is_async=inspect.iscoroutinefunction(handler)
        or inspect.iscoroutinefunction(getattr(handler, "__call__", None)),  # noqa: B004
        schedule=schedule,
        static_scopes=static_scopes,
        scopes_fn=scopes_fn,
        catch_up=catch_up_mode,
        catch_up_window=dur("catch_up_window", catch_up_window, allow_zero=False),
        max_plans_per_tick=plans_per_tick,
        max_lateness=None if max_lateness is None else dur("max_lateness", max_lateness),
        schedule_delay=dur("schedule_delay", schedule_delay),
        overlap=choice("overlap", overlap, get_args(Overlap)),
        jitter=dur("jitter", jitter),
        run_timeout=run_to,
        stale_timeout=stale_to,
        heartbeat_interval=beat,
        allow_stale_reentry=allow_stale_reentry,
        max_attempts=integer("max_attempts", max_attempts, 1),
        retry_backoff=tuple(dur(f"retry_backoff[{i}]", d) for i, d in enumerate(retry_backoff)),
        max_running=None if max_running is None else integer("max_running", max_running, 1),
        priority=priority,
        transactional=transactional,
    )


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


JOB_OPTIONS = frozenset(inspect.signature(_build_job).parameters) - {"handler"}
