"""Schedules as data (docs/schedules.md), the pure part: the spec a caller puts, its validation
and normalisation, the read result, and the plan times of one stored schedule. No I/O, no SQL
and no clock: every function gets the instants it needs as arguments, so all of it is
deterministic and unit-tested without a database.

Plan times are computed by the same recurrence classes as code-defined jobs
(:class:`~pgsched._planning.recurrence.CadenceRecurrence`,
:class:`~pgsched._planning.recurrence.CronRecurrence` with the default DST rules), so the
rules of the README's job options apply in the schedule's own zone: cadences are aligned to
the Unix epoch in UTC, cron expressions with a fixed hour fire once per local day across DST
changes, and those whose hour is ``*`` or a step follow elapsed time.

Storage, locking, notification and claiming live elsewhere; this module only decides what
is valid, what the canonical stored form is (:class:`ValidSchedule`), whether a replacement
changes plan times (:attr:`ValidSchedule.spec_key`) and which plan comes next.
"""

from __future__ import annotations

import difflib
import functools
import json
import math
import reprlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast, get_args
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterError

from .._errors import ConfigError
from .._records import Row
from .._structures import (
    SCHEDULE_FIELDS,
    Schedule,
    ScheduleSpec,
    Scope,
    check_job_name,
    trusted_scope,
)
from .._times import US, parse_duration
from .calendars import Calendar, CalendarRecurrence, OnExcluded
from .recurrence import CadenceRecurrence, CronRecurrence, Recurrence, zone

MAX_PAYLOAD_BYTES = 16384  # 16 KiB of UTF-8 JSON, canonical compact form
# Where "never fires" is checked from: a fixed instant keeps validation deterministic. A
# 5-field expression that fires at all fires within 28 years of any instant.
_REFERENCE = datetime(2000, 1, 1, tzinfo=UTC)
# starts_at / ends_at must lie in this range: far from datetime's limits, so plan arithmetic
# (which looks decades ahead) never overflows, and inside PostgreSQL's timestamptz range.
_EARLIEST = datetime(1900, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)
_SHOWN = 100  # characters of a value's repr quoted in an error message
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 4, _SHOWN, _SHOWN, _SHOWN
_FIRST_SPAN = timedelta(hours=1)  # first chunk listed by plans_between for cron schedules
_TIMES = ("starts_at", "ends_at", "next_plan_time")  # the times of a row, read back in UTC
# Other names for the fields of a schedule (a job's option names, other schedulers'),
# offered as the hint when one is given instead.
_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "tz": ("timezone",),
    "time_zone": ("timezone",),
    "schedule": ("cron", "every"),
    "interval": ("every",),
    "crontab": ("cron",),
    "data": ("payload",),
    "kwargs": ("payload",),
    "start": ("starts_at",),
    "start_date": ("starts_at",),
    "end": ("ends_at",),
    "end_date": ("ends_at",),
    "until": ("ends_at",),
}


def check_fields(job: str, scope: Scope, given: Iterable[str]) -> None:
    """:class:`ConfigError` naming the job, the scope and the first of ``given`` that is no
    field of a schedule, with the field meant when there is one."""
    unknown = sorted(set(given) - set(SCHEDULE_FIELDS))
    if not unknown:
        return
    name = unknown[0]
    near = _FIELD_ALIASES.get(name.lower()) or difflib.get_close_matches(name, SCHEDULE_FIELDS, 1)
    hint = f" (did you mean {' or '.join(map(repr, near))}?)" if near else ""
    raise ConfigError(f"job {job!r}, scope {scope}: unknown field {name!r}{hint}")


# (every in whole microseconds, normalised cron expression, IANA zone, the named calendar
# and on_excluded): what plan times depend on. Payload, window and paused are not part of it.
SpecKey = tuple[int | None, str | None, str, Calendar | None, OnExcluded]
Calendars = Mapping[str, Calendar]  # the calendars a scheduler names (Scheduler.calendar)
NO_CALENDARS: Calendars = {}


@dataclass(frozen=True)
class ValidSchedule:
    """A checked and normalised schedule: what is stored. Built by :func:`check_schedule`.

    ``every`` is a positive ``timedelta`` or None; ``cron`` has its whitespace collapsed to
    single spaces; ``payload`` is the JSON round trip of the caller's payload (``{}`` when
    none was given) and ``payload_json`` its canonical text (sorted keys, compact, UTF-8);
    ``starts_at`` / ``ends_at`` are aware UTC or None; ``calendar`` is the name of a calendar
    the scheduler registers and ``named`` that calendar (None when the caller does not know
    it: such a schedule's plans cannot be computed here).
    """

    job: str
    scope: Scope
    every: timedelta | None
    cron: str | None
    timezone: str
    payload: dict[str, Any]
    payload_json: str
    starts_at: datetime | None
    ends_at: datetime | None
    paused: bool
    calendar: str | None = None
    on_excluded: OnExcluded = "skip"
    named: Calendar | None = field(default=None, compare=False)

    @property
    def spec_key(self) -> SpecKey:
        """What the plan times depend on: ``(every in microseconds, cron, timezone, calendar,
        on_excluded)``; :class:`ConfigError` for a calendar this caller does not know.

        Two schedules with equal keys have the same plan times, so a put whose key equals the
        stored one (identical, or only payload / window / paused changed) leaves the stored
        plan times alone; a different key is a replacement of the spec. The zone is part of
        the key for cadences too: a put that changes ``timezone`` replaces the spec
        (docs/schedules.md, "Replacing the spec").
        """
        every = None if self.every is None else self.every // US
        if self.calendar is not None and self.named is None:
            raise ConfigError(
                f"job {self.job!r}, scope {self.scope}: calendar={self.calendar!r} is not"
                " registered here (Scheduler.calendar): its plans are known only to the"
                " replicas that register it"
            )
        return (every, self.cron, self.timezone, self.named, self.on_excluded)

    def as_schedule(
        self, next_plan_time: datetime | None, created_at: datetime, updated_at: datetime
    ) -> Schedule:
        """The public read result for this schedule (with a payload of its own: a copy of
        a checked one, or the one read from a row)."""
        return Schedule(
            job=self.job,
            scope=self.scope,
            every=self.every,
            cron=self.cron,
            timezone=self.timezone,
            payload=json.loads(self.payload_json) if self.payload_json else self.payload,
            starts_at=self.starts_at,
            ends_at=self.ends_at,
            paused=self.paused,
            next_plan_time=next_plan_time,
            created_at=created_at,
            updated_at=updated_at,
            calendar=self.calendar,
            on_excluded=self.on_excluded,
        )


def check_schedule(
    job: str, spec: ScheduleSpec, calendars: Calendars | None = None
) -> ValidSchedule:
    """Validate ``spec`` for ``job`` and return its normalised form, or raise
    :class:`ConfigError` with a one-line message naming the job, the scope, the field and
    the value, e.g. ``job 'reminder', scope user:42: cron='61 * * * *' is not a valid cron
    expression (...)``.

    Refused: both or neither of ``every`` / ``cron``; a cron expression jobs would refuse
    (not 5 fields, croniter's random ``R`` or hashed ``H`` fields, never fires); an unknown
    IANA zone; an ``every`` that is not a positive duration of at most 100 years; a payload
    that is not a JSON object with string keys, holds a value JSON cannot represent (or a NUL
    character, which PostgreSQL's jsonb cannot store), or exceeds 16 KiB as canonical UTF-8
    JSON; ``starts_at`` / ``ends_at`` that are not timezone-aware datetimes between 1900 and
    9000, or with ``ends_at <= starts_at``; a ``paused`` that is not a bool; a scope over
    :class:`Scope`'s limits; a ``calendar`` that is not one of ``calendars`` (None: the caller
    does not know the job's calendars, and refuses every name), an ``on_excluded`` other than
    ``skip``, ``next_working_day``, ``previous_working_day``, or given without a calendar.

    Naive datetimes are refused, as everywhere in pgsched's Python API (``_times.aware``);
    only text from the command line is read as UTC when it has no offset (``parse_time``),
    so the CLI and HTTP layers convert their text before building a :class:`ScheduleSpec`.
    """
    job = check_job_name(job)
    if not isinstance(spec, ScheduleSpec):
        raise ConfigError(f"job {job!r}: spec={_show(spec)} must be a pgsched.ScheduleSpec")
    c = _Checker(job, _check_scope(job, spec.scope))
    every, cron, timezone = c.spec(spec.every, spec.cron, spec.timezone)
    payload, payload_json = c.payload(spec.payload)
    starts_at = c.instant("starts_at", spec.starts_at)
    ends_at = c.instant("ends_at", spec.ends_at)
    if starts_at is not None and ends_at is not None and ends_at <= starts_at:
        why = f"must be later than starts_at={_show(spec.starts_at)}"
        raise c.bad("ends_at", spec.ends_at, why)
    if not isinstance(spec.paused, bool):
        raise c.bad("paused", spec.paused, "must be True or False")
    named, on_excluded = c.calendar(spec.calendar, spec.on_excluded, calendars)
    return ValidSchedule(
        job=job,
        scope=spec.scope,
        every=every,
        cron=cron,
        timezone=timezone,
        payload=payload,
        payload_json=payload_json,
        starts_at=starts_at,
        ends_at=ends_at,
        paused=spec.paused,
        calendar=spec.calendar,
        on_excluded=on_excluded,
        named=named,
    )


def first_plan_after(valid: ValidSchedule, after: datetime) -> datetime | None:
    """The first plan time strictly after ``after`` with ``starts_at <= plan < ends_at``, as
    aware UTC; None when no plan is left before ``ends_at``.

    When ``starts_at`` is later than ``after`` this is the first occurrence at or after
    ``starts_at``. A put at instant ``t`` gets ``first_plan_after(valid, t)`` as its first
    plan: a put exactly on a plan boundary does not get that plan; and the plan after a plan
    just claimed is ``first_plan_after(valid, plan)``. ``after`` must be aware.
    """
    lo = _lower_bound(valid, after)
    plan = _next_after(valid.spec_key, lo)
    if plan is None or (valid.ends_at is not None and plan >= valid.ends_at):
        return None
    return plan


def plans_between(
    valid: ValidSchedule, after: datetime, until: datetime, limit: int
) -> list[datetime]:
    """Plan times ``p`` with ``after < p <= until`` and ``starts_at <= p < ends_at``, aware
    UTC, oldest first, at most ``limit`` of them (the oldest ones): the plans missed while a
    schedule was paused or its replicas down. Costs about ``limit`` plans, however long the
    range."""
    lo = _lower_bound(valid, after)
    hi = _utc(until, "until")
    if valid.ends_at is not None:
        hi = min(hi, valid.ends_at - US)  # plan times are whole microseconds
    if limit <= 0 or hi <= lo:
        return []
    recurrence = recurrence_for(valid.spec_key)
    if isinstance(recurrence, CadenceRecurrence):
        first = recurrence.next_after(lo)
        if first > hi:
            return []
        if (hi - first) // recurrence.every >= limit:
            hi = first + recurrence.every * (limit - 1)
        return recurrence.plans_between(lo, hi)
    return _chunked_plans(recurrence, lo, hi, limit)


def recurrence_plans(
    recurrence: Recurrence, after: datetime, until: datetime, limit: int
) -> tuple[int, bool]:
    """How many plans ``recurrence`` has in ``(after, until]``, and whether that is exact:
    computed for a cadence (without listing them), else counted up to ``limit + 1`` (a
    range of millions costs about ``limit`` plans; past it the count is a lower bound)."""
    if isinstance(recurrence, CadenceRecurrence):
        first = recurrence.next_after(after)
        if first is None or first > until:
            return 0, True
        return (until - first) // recurrence.every + 1, True
    count = len(_chunked_plans(recurrence, after, until, limit + 1))
    return count, count <= limit


def stored_schedule(job: str, row: Row, calendars: Calendars = NO_CALENDARS) -> ValidSchedule:
    """The schedule a row of ``schedules`` holds (trusted: it was checked when put), its
    calendar looked up in ``calendars``."""
    every = None if row["every_us"] is None else US * row["every_us"]
    payload: dict[str, Any] = row.get("payload") or {}
    name: str | None = row.get("calendar")
    return ValidSchedule(
        job=job,
        scope=trusted_scope(row["scope_kind"], row["scope_id"]),
        every=every,
        cron=row["cron"],
        timezone=row["timezone"],
        payload=payload,
        payload_json="",
        starts_at=row["starts_at"],
        ends_at=row["ends_at"],
        paused=bool(row.get("paused", False)),
        calendar=name,
        on_excluded=cast(OnExcluded, row.get("on_excluded") or "skip"),
        named=None if name is None else calendars.get(name),
    )


def read_schedule(job: str, row: Row) -> Schedule:
    """The read result (``get_schedule``, ``list_schedules``) of a row of ``schedules``, its
    times in UTC."""
    utc = {k: None if row[k] is None else row[k].astimezone(UTC) for k in _TIMES}
    valid = stored_schedule(job, {**row, **utc})
    return valid.as_schedule(
        utc["next_plan_time"], row["created_at"].astimezone(UTC), row["updated_at"].astimezone(UTC)
    )


@functools.lru_cache(maxsize=65536)
def _cron_problem(normal: str) -> str | None:
    """Why a code-defined job would refuse the cron expression ``normal``, or None (cached
    per expression: a bulk put repeats expressions, and parsing and the "never fires" walk
    cost about half a millisecond). The zone plays no part: a wall time a zone skips fires
    at the end of its gap."""
    try:
        recurrence = recurrence_for((None, normal, "UTC", None, "skip"))
    except (CroniterBadCronError, CroniterError, ValueError, KeyError) as exc:
        return f"is not a valid cron expression ({' '.join(str(exc).split())})"
    quick = isinstance(recurrence, CronRecurrence) and recurrence.surely_fires()
    if not quick and recurrence.next_after(_REFERENCE) is None:
        return "never fires"
    return None


def _next_after(key: SpecKey, t: datetime) -> datetime | None:
    """The recurrence's first plan strictly after ``t``, remembering the last few answers per
    spec: ``next_after(t0) = r`` means no plan lies in ``(t0, r)``, so every ``t`` in
    ``[t0, r)`` has the same answer. A bulk put computes each spec's next plan after one
    instant, and a claim asks for a due plan and the one after it, so schedules sharing a
    spec cost one walk per distinct answer."""
    known = _NEXT_MEMO.get(key)
    if known is not None:
        for start, plan in known:
            if start <= t and (plan is None or t < plan):
                return plan
    plan = recurrence_for(key).next_after(t)
    if known is None:
        if len(_NEXT_MEMO) >= _NEXT_MEMO_SIZE:
            _NEXT_MEMO.clear()
        known = _NEXT_MEMO[key] = []
    known.insert(0, (t, plan))
    del known[_NEXT_MEMO_DEPTH:]
    return plan


_NEXT_MEMO: dict[SpecKey, list[tuple[datetime, datetime | None]]] = {}
_NEXT_MEMO_SIZE = 100_000
_NEXT_MEMO_DEPTH = 4  # answers kept per spec: a claim alternates between two of them


@functools.lru_cache(maxsize=40_000)  # about 1.5 KB each for cron: at most ~60 MB
def recurrence_for(key: SpecKey) -> Recurrence:
    """The recurrence of a spec (cached: parsing a cron expression is not free).

    A cadence ignores the zone (it is aligned to the epoch in UTC); a cron expression is
    evaluated in its zone with the default DST rules of a code-defined job; a calendar
    filters or moves either's plans as a code-defined job's does, in the schedule's zone."""
    every_us, cron, timezone, calendar, on_excluded = key
    inner: Recurrence
    if every_us is not None:
        inner = CadenceRecurrence(US * every_us)
    else:
        assert cron is not None
        inner = CronRecurrence(cron, zone(timezone))
    if calendar is None:
        return inner
    return CalendarRecurrence(inner, calendar, on_excluded, zone(timezone))


def _chunked_plans(
    recurrence: Recurrence, lo: datetime, hi: datetime, limit: int
) -> list[datetime]:
    """Up to ``limit`` plans in ``(lo, hi]``, listed in chunks that double in length, each
    starting at the next plan, so neither an empty stretch nor a dense one costs more than
    a few chunks."""
    out: list[datetime] = []
    span = _FIRST_SPAN
    while len(out) < limit and lo < hi:
        nxt = recurrence.next_after(lo)
        if nxt is None or nxt > hi:
            break
        lo = nxt - US
        end = hi if hi - lo <= span else lo + span
        out.extend(recurrence.plans_between(lo, end))
        lo, span = end, span * 2
    return out[:limit]


def _lower_bound(valid: ValidSchedule, after: datetime) -> datetime:
    """The instant plans must be strictly after: ``after``, or just before ``starts_at``."""
    lo = _utc(after, "after")
    if valid.starts_at is not None and valid.starts_at > lo:
        lo = valid.starts_at - US
    return lo


def _utc(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name}={value!r} must be a timezone-aware datetime")
    return value.astimezone(UTC)


class _Checker:
    """The checks of one schedule's fields, each raising :class:`ConfigError` prefixed with
    the job and the scope."""

    def __init__(self, job: str, scope_text: str) -> None:
        self.prefix = f"job {job!r}, scope {scope_text}: "

    def bad(self, field: str, value: object, why: str) -> ConfigError:
        return ConfigError(f"{self.prefix}{field}={_show(value)} {why}")

    def spec(
        self, every: object, cron: object, timezone: object
    ) -> tuple[timedelta | None, str | None, str]:
        """``every`` / ``cron`` / ``timezone`` checked and normalised."""
        if (every is None) == (cron is None):
            got = f"every={_show(every)}, cron={_show(cron)}"
            raise ConfigError(f"{self.prefix}{got}: exactly one of every= or cron= is required")
        if not isinstance(timezone, str):
            raise self.bad("timezone", timezone, "must be a string naming an IANA time zone")
        try:
            tz = zone(timezone)
        except (ZoneInfoNotFoundError, ValueError, OSError):
            raise self.bad("timezone", timezone, "is not a known IANA time zone") from None
        if every is not None:
            try:
                delta = parse_duration(every, field="every", allow_zero=False)
            except ConfigError as exc:
                raise ConfigError(f"{self.prefix}{exc}") from None
            return delta, None, timezone
        return None, self.cron(cron, tz), timezone

    def calendar(
        self, name: object, on_excluded: object, calendars: Calendars | None
    ) -> tuple[Calendar | None, OnExcluded]:
        """The named calendar and ``on_excluded``, checked."""
        if on_excluded not in get_args(OnExcluded):
            choices = ", ".join(map(repr, get_args(OnExcluded)))
            raise self.bad("on_excluded", on_excluded, f"must be one of {choices}")
        if name is None:
            if on_excluded != "skip":
                raise self.bad("on_excluded", on_excluded, "needs calendar=")
            return None, "skip"
        if not isinstance(name, str):
            raise self.bad("calendar", name, "must be the name of a calendar (a string)")
        if calendars is None:
            why = "is not known here: put it where the job's code names it (the CLI: --app APP)"
            raise self.bad("calendar", name, why)
        known = calendars.get(name)
        if known is None:
            names = ", ".join(map(repr, sorted(calendars))) or "none"
            raise self.bad("calendar", name, f"is not a registered calendar (registered: {names})")
        return known, cast(OnExcluded, on_excluded)

    def cron(self, expr: object, tz: ZoneInfo) -> str:
        """``expr`` with its whitespace normalised, if a code-defined job would accept it."""
        if not isinstance(expr, str):
            raise self.bad("cron", expr, "must be a string")
        normal = " ".join(expr.split())
        problem = _cron_problem(normal)
        if problem is not None:
            raise self.bad("cron", expr, problem)
        return normal

    def payload(self, payload: object) -> tuple[dict[str, Any], str]:
        """The payload's JSON round trip and canonical text (``{}`` for None)."""
        if payload is None:
            return {}, "{}"
        if not isinstance(payload, dict):
            raise self.bad("payload", payload, "must be a JSON object (a dict)")
        quick = self._quick_payload(payload)
        if quick is not None:
            return quick
        try:
            text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            size = len(text.encode("utf-8"))
        except (TypeError, ValueError, RecursionError) as exc:
            why = " ".join(str(exc).split()) or type(exc).__name__
            raise self.bad("payload", payload, f"is not JSON-serialisable ({why})") from None
        if size > MAX_PAYLOAD_BYTES:
            why = f"is {size} bytes as JSON; the limit is {MAX_PAYLOAD_BYTES} bytes"
            raise self.bad("payload", payload, why)
        problem = _json_problem(payload)
        if problem is not None:
            raise self.bad("payload", payload, f"is not a JSON object: {problem}")
        canonical = json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        loaded: dict[str, Any] = json.loads(canonical)
        return loaded, canonical

    def _quick_payload(self, payload: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
        """The common case in one encoding: the canonical text, and its decoding equal to
        ``payload`` with no NUL in it. None when anything is off: the full checks then say
        what (a bulk put validates payloads at C speed this way)."""
        try:
            canonical = json.dumps(
                payload, ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
            )
        except (TypeError, ValueError, RecursionError):
            return None
        if len(canonical) * 4 > MAX_PAYLOAD_BYTES and len(canonical.encode()) > MAX_PAYLOAD_BYTES:
            return None
        if "\\u0000" in canonical:
            return None
        loaded: dict[str, Any] = json.loads(canonical)
        if loaded != payload:  # a non-string key, a tuple: the full checks explain
            return None
        return loaded, canonical

    def instant(self, field: str, value: object) -> datetime | None:
        """``value`` as aware UTC (None stays None); naive datetimes are refused."""
        if value is None:
            return None
        if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
            raise self.bad(field, value, "must be a timezone-aware datetime")
        try:
            utc = value.astimezone(UTC)
        except OverflowError:
            utc = _LATEST if value.year > 2000 else _EARLIEST - US
        if not _EARLIEST <= utc < _LATEST:
            raise self.bad(field, value, "must lie between the years 1900 and 9000")
        return utc


def _check_scope(job: str, scope: object) -> str:
    """The scope as shown in messages, once it is a :class:`Scope` within Scope's own limits
    (checked again here by rebuilding it, in case those checks were bypassed)."""
    if not isinstance(scope, Scope):
        raise ConfigError(f"job {job!r}: scope={_show(scope)} must be a pgsched.Scope")
    kind, ident = getattr(scope, "kind", None), getattr(scope, "id", None)
    text = f"{kind}:{ident}"
    if not text.isprintable():
        text = repr(text)
    if len(text) > 80:
        text = f"{text[:80]}... ({len(text)} characters)"
    try:
        Scope(kind, ident)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"job {job!r}, scope {text}: {exc}") from None
    return text


def _json_problem(payload: dict[str, Any]) -> str | None:
    """Why ``payload`` (already known to encode, so free of cycles) would not come back from
    a jsonb column as the same value, or None: a non-string key, a NUL character, or a
    container or scalar JSON does not have (tuples pass and come back as lists)."""
    stack: list[tuple[str, object]] = [("payload", payload)]
    while stack:
        path, value = stack.pop()
        if value is None or isinstance(value, bool | int):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                return f"{path} is {value!r}"
        elif isinstance(value, str):
            if "\x00" in value:
                return f"{path} contains a NUL character"
        elif isinstance(value, list | tuple):
            stack.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or "\x00" in key:
                    return f"{path} has the key {_show(key)}; keys must be strings without NUL"
                stack.append((f"{path}[{_show(key)}]", item))
        else:
            return f"{path} is a {type(value).__name__}"
    return None


def _show(value: object) -> str:
    """``value`` for an error message: ISO text for datetimes, else its repr, shortened (and
    bounded in depth, so a deep or cyclic payload costs little to show)."""
    text = repr(value.isoformat()) if isinstance(value, datetime) else _REPR.repr(value)
    if len(text) > _SHOWN:
        text = f"{text[:_SHOWN]}..."
    return text
