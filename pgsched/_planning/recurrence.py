"""Pure planning: which plan instants a recurrence has (a cadence, a cron expression in a
zone, a planner hook), and which of them are due. No I/O.

Every function takes the current instant as an argument (the database's clock, read by the
caller), so all of it is deterministic and unit-tested without a database.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import heapq
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol, TypeVar, cast, runtime_checkable
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from .._times import US, format_duration
from .cron import cron_parts, parsed

_T = TypeVar("_T")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Wider than any UTC offset change in the tz database (30 min to 2 h), so a scan of wall
# times this far either side of a range sees every occurrence that maps into the range.
_DAY = timedelta(days=1)
_DST_MARGIN = timedelta(hours=3)
# How far next/previous searches look before concluding an expression never fires.
_HORIZONS = (
    timedelta(hours=2),
    timedelta(days=2),
    timedelta(days=40),
    timedelta(days=400),
    timedelta(days=3000),
    timedelta(days=366 * 29),  # weekday-of-month rules such as `1#5` in February: 28 years
)
# Every-plan catch-up considers at most this many plans per tick (the newest ones).
MAX_CATCH_UP_PLANS = 1000

CatchUp = Literal["latest_only", "every_plan"]
DstRepeated = Literal["first", "last", "both"]
DstSkipped = Literal["shift", "skip"]


@runtime_checkable
class Planner(Protocol):
    """What a custom ``planner=`` hook implements: the plan instants in ``(start, end]``."""

    def plans_between(self, start: datetime, end: datetime) -> Sequence[datetime]:
        """Aware UTC plan instants ``p`` with ``start < p <= end``, ascending."""
        ...


class Recurrence:
    """When a job's plans fall. Not a stored ``pgsched.Schedule``: the recurrence of a
    code-defined job, or of one stored schedule (``_planning.schedules``). Subclasses give
    ``plans_between``; next, latest and upcoming derive from it."""

    def plans_between(self, start: datetime, end: datetime) -> Sequence[datetime]:
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__

    def key(self) -> str:
        """What its plans are computed from, as cursors store it (``spec_key``): never
        reworded, or every cursor would be computed again."""
        return self.describe()

    def next_after(self, t: datetime) -> datetime | None:
        """The first plan strictly after ``t``, or None if none within about eight years."""
        for horizon in _HORIZONS:
            plans = self.plans_between(t, t + horizon)
            if plans:
                return plans[0]
        return None

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        """The last plan at or before ``t``, or None if none within about eight years."""
        for horizon in _HORIZONS:
            plans = self.plans_between(t - horizon, t)
            if plans:
                return plans[-1]
        return None

    def nominal_interval(self, now: datetime) -> timedelta | None:
        """Time between the next two plans after ``now`` (None if fewer than two)."""
        nxt = self.upcoming(now, 2)
        return nxt[1] - nxt[0] if len(nxt) == 2 else None

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` plans strictly after ``after``."""
        out: list[datetime] = []
        t = after
        while len(out) < count:
            nxt = self.next_after(t)
            if nxt is None:
                break
            out.append(nxt)
            t = nxt
        return out


class HookRecurrence(Recurrence):
    """Adapts a user's :class:`Planner` hook, normalising its output to sorted aware UTC."""

    def __init__(self, hook: Planner) -> None:
        self._hook = hook

    def plans_between(self, start: datetime, end: datetime) -> Sequence[datetime]:
        plans = {p.astimezone(UTC) for p in self._hook.plans_between(start, end)}
        return sorted(p for p in plans if start < p <= end)

    def describe(self) -> str:
        return f"planner={type(self._hook).__name__}"


class DynamicRecurrence(Recurrence):
    """The recurrence of a dynamic job (docs/schedules.md): the job has none of its own; each
    of its scopes has a stored schedule, planned by ``_planning.schedules`` and claimed by the
    engine with ``_planning.dynamic``."""

    def plans_between(self, start: datetime, end: datetime) -> Sequence[datetime]:
        return []

    def describe(self) -> str:
        return "dynamic"

    def next_after(self, t: datetime) -> datetime | None:
        return None

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        return None


class CadenceRecurrence(Recurrence):
    """Plans every ``every``, aligned to the Unix epoch in UTC."""

    def __init__(self, every: timedelta) -> None:
        if every <= timedelta(0):
            raise ValueError("cadence must be positive")
        self.every = every
        self._step = every // US

    def describe(self) -> str:
        return f"every {format_duration(self.every)}"

    def key(self) -> str:
        return f"every {_legacy_cadence(self.every)}"  # the key cursors have stored since v1

    def latest_at_or_before(self, t: datetime) -> datetime:
        offset = (t - EPOCH) // US
        return EPOCH + US * (offset - offset % self._step)

    def next_after(self, t: datetime) -> datetime:
        return self.latest_at_or_before(t) + self.every

    def nominal_interval(self, now: datetime) -> timedelta:
        return self.every

    def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
        out = []
        p = self.next_after(start)
        while p <= end:
            out.append(p)
            p += self.every
        return out

    def count_between(self, start: datetime, end: datetime) -> int:
        """Number of plans in ``(start, end]`` without listing them."""
        if end <= start:
            return 0
        return (self.latest_at_or_before(end) - self.latest_at_or_before(start)) // self.every


@functools.lru_cache(maxsize=1024)
def zone(key: str) -> ZoneInfo:
    """``ZoneInfo(key)``, held: zoneinfo's own cache keeps only eight zones strongly, and
    reading a zone file again costs more than a cron step. Raises as ``ZoneInfo`` does."""
    return ZoneInfo(key)


class CronRecurrence(Recurrence):
    """Occurrences of a 5-field cron expression, read as crontab(5) reads it (``cron``: one
    or two croniter expressions whose wall times together are the expression's), in an IANA
    zone, as UTC instants.

    Expressions with a fixed hour field are wall-clock schedules: a wall time skipped by
    spring-forward fires at the first instant after the gap, a repeated one fires once at its
    first occurrence. Expressions whose hour field is ``*`` or a step follow elapsed time:
    every instant whose local time matches fires (so a repeated hour fires twice, a skipped
    one not at all). ``dst_repeated`` / ``dst_skipped`` override either default.
    """

    def __init__(
        self,
        expr: str,
        tz: ZoneInfo,
        dst_repeated: DstRepeated | None = None,
        dst_skipped: DstSkipped | None = None,
    ) -> None:
        # crontab(5)'s reading, as one or two croniter expressions (see .cron).
        parts = cron_parts(expr)
        steppers = [copy.copy(parsed(part)) for part in parts]  # raises CroniterBadCronError
        for stepper in steppers:
            for token in re.split(r"[\s,/-]+", " ".join(map(str, stepper.expressions))):
                if token.upper() in ("R", "H") or token.upper().startswith(("R(", "H(")):
                    # croniter's random and hashed fields differ per process: replicas would
                    # not agree on the plan times.
                    raise ValueError(f"{expr!r} uses a random or hashed field ({token})")
        self.expr = expr
        self.tz = tz
        self._parts = parts
        # One croniter per part, re-aimed per call (parsing costs more than a step); the lock
        # lets threads share this recurrence (an Admin's bulk put and the replica's claims).
        self._steppers = steppers
        self._stepper_lock = threading.Lock()
        hour = parts[0].split(" ")[1]
        self.follows_elapsed_time = hour == "*" or "/" in hour
        self.dst_repeated: DstRepeated = dst_repeated or (
            "both" if self.follows_elapsed_time else "first"
        )
        self.dst_skipped: DstSkipped = dst_skipped or (
            "skip" if self.follows_elapsed_time else "shift"
        )

    def describe(self) -> str:
        return f"cron {self.expr!r} {self.tz.key}"

    def surely_fires(self) -> bool:
        """True when croniter's expanded fields of some part show a day that exists in every
        month (any day, the last day, a day up to the 28th, or any weekday, which croniter
        ORs with the day of month): every minute, hour and month then has a matching day.
        False means "walk to find out" (February 30th never comes)."""
        return any(_surely_fires(stepper) for stepper in self._steppers)

    def _margin(self, start: datetime, end: datetime) -> timedelta:
        """How far around a range to scan wall times: the usual DST margin, or more where
        the zone's offset changed by more than that (e.g. Vostok's -7 h in 1994)."""
        day = timedelta(days=2)
        before = (start - day).astimezone(self.tz).utcoffset() or timedelta(0)
        after = (end + day).astimezone(self.tz).utcoffset() or timedelta(0)
        return max(_DST_MARGIN, abs(after - before) + timedelta(hours=1))

    def _wall(self, t: datetime) -> datetime:
        return t.astimezone(self.tz).replace(tzinfo=None)

    def next_after(self, t: datetime) -> datetime | None:
        """Walks croniter forward from just before ``t``: cost is a DST margin of wall times,
        however far away the next plan is (one croniter step when no offset change is near)."""
        quick = self._one_step(t, backwards=False)
        return quick if quick is not None else self._next_by_walk(t)

    def _next_by_walk(self, t: datetime) -> datetime | None:
        margin = self._margin(t, t)
        best: datetime | None = None
        best_wall: datetime | None = None
        for wall in _walls(self._parts, self._wall(t) - margin, self._wall(t) + _HORIZONS[-1]):
            if best_wall is not None and wall > best_wall + margin:
                break
            for instant in self._instants(wall):
                if instant > t and (best is None or instant < best):
                    best, best_wall = instant, wall
        return best

    def _one_step(self, t: datetime, *, backwards: bool) -> datetime | None:
        """The next plan after ``t`` (``backwards``: the latest at or before it) in one
        croniter step, when no offset change is within a day of ``t`` and the matching wall
        time exists exactly once: every wall time croniter stepped over then stands for
        instants on the right side of ``t`` (a change further away moves the wall clock by
        less than a day), and none of them matched, so no DST rule applies. None when that
        does not hold (the caller walks with the DST margin)."""
        offset = self._steady_offset(t)
        if offset is None:
            return None
        aim = self._wall(t) + US if backwards else self._wall(t)  # get_prev is strictly before
        best: datetime | None = None
        with self._stepper_lock:
            for stepper in self._steppers:
                stepper.set_current(aim, force=True)
                try:
                    wall: datetime = (
                        stepper.get_prev(datetime) if backwards else stepper.get_next(datetime)
                    )
                except CroniterBadDateError:
                    continue  # this part never fires: the other may
                if best is None or (wall > best if backwards else wall < best):
                    best = wall
        if best is None:
            return None
        instant = self._only_instant(best, offset)
        if instant is None or (instant > t if backwards else instant <= t):
            return None
        return instant

    def _steady_offset(self, t: datetime) -> timedelta | None:
        """The zone's UTC offset at ``t`` when it is the same a day before and a day after."""
        offset = t.astimezone(self.tz).utcoffset()
        for probe in (t - _DAY, t + _DAY):
            if probe.astimezone(self.tz).utcoffset() != offset:
                return None
        return offset

    def _only_instant(self, wall: datetime, near: timedelta) -> datetime | None:
        """The instant of ``wall`` when that wall time exists exactly once (in no gap, no
        fold) and its offset is less than a day from ``near``; else None."""
        first = wall.replace(tzinfo=self.tz, fold=0)
        offset = first.utcoffset()
        if offset is None or offset != wall.replace(tzinfo=self.tz, fold=1).utcoffset():
            return None
        instant = first.astimezone(UTC)
        if abs(offset - near) >= _DAY or instant.astimezone(self.tz).replace(tzinfo=None) != wall:
            return None
        return instant

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        """Like :meth:`next_after`, walking croniter backwards from just after ``t`` (one
        step when no offset change is near)."""
        quick = self._one_step(t, backwards=True)
        return quick if quick is not None else self._latest_by_walk(t)

    def _latest_by_walk(self, t: datetime) -> datetime | None:
        margin = self._margin(t, t)
        best: datetime | None = None
        best_wall: datetime | None = None
        for wall in _walls(
            self._parts, self._wall(t) + margin, self._wall(t) - _HORIZONS[-1], back=True
        ):
            if best_wall is not None and wall < best_wall - margin:
                break
            for instant in self._instants(wall):
                if instant <= t and (best is None or instant > best):
                    best, best_wall = instant, wall
        return best

    def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
        if end <= start:
            return []
        margin = self._margin(start, end)
        wall_start = self._wall(start) - margin
        wall_end = self._wall(end) + margin
        found: set[datetime] = set()
        for wall in _walls(self._parts, wall_start, wall_end):
            for instant in self._instants(wall):
                if start < instant <= end:
                    found.add(instant)
        return sorted(found)

    def _instants(self, wall: datetime) -> list[datetime]:
        """The UTC instants a local wall time stands for, under this recurrence's DST rules."""
        first = wall.replace(tzinfo=self.tz, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=self.tz, fold=1).astimezone(UTC)
        if first.astimezone(self.tz).replace(tzinfo=None) != wall:
            # The wall time does not exist: it lies in a spring-forward gap.
            if self.dst_skipped == "skip":
                return []
            return [_transition_between(self.tz, second, first)]
        if first == second:
            return [first]
        return {"first": [first], "last": [second], "both": [first, second]}[self.dst_repeated]


def _surely_fires(stepper: croniter) -> bool:
    if stepper.nth_weekday_of_month:
        return False
    days, weekdays = stepper.expanded[2], stepper.expanded[4]
    if weekdays != ["*"]:
        return True
    return any(d in ("*", "l") or (isinstance(d, int) and d <= 28) for d in days)


def _walls(
    parts: Sequence[str], start: datetime, until: datetime, *, back: bool = False
) -> Iterator[datetime]:
    """Naive wall times matching any of the croniter expressions ``parts`` from ``start``
    to ``until``, each once: ``(start, until]`` ascending, or with ``back``
    ``[until, start)`` newest first."""
    last: datetime | None = None
    merged = heapq.merge(*(_part_walls(p, start, until, back) for p in parts), reverse=back)
    for wall in merged:
        if wall != last:
            yield wall
        last = wall


def _part_walls(expr: str, start: datetime, until: datetime, back: bool) -> Iterator[datetime]:
    it = croniter(expr, start)
    step = it.get_prev if back else it.get_next
    while True:
        try:
            wall: datetime = step(datetime)
        except CroniterBadDateError:  # the expression never fires (e.g. 31 February)
            return
        if (wall < until) if back else (wall > until):
            return
        yield wall


def _transition_between(tz: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first instant in ``(before, after]`` whose UTC offset is the one at ``after``."""
    target = after.astimezone(tz).utcoffset()
    lo, hi = before, after
    while hi - lo > timedelta(seconds=1):
        mid = lo + (hi - lo) / 2
        if mid.astimezone(tz).utcoffset() == target:
            hi = mid
        else:
            lo = mid
    return hi.replace(microsecond=0) if hi.microsecond else hi


@dataclass(frozen=True, slots=True)
class DuePlans:
    """The plans a job may claim now, oldest first, and those dropped by ``max_lateness``."""

    plans: list[datetime]
    late: list[datetime]


class PlanCursor:
    """Per-job memo of the due plans, so a tick with no new plan recomputes nothing."""

    def __init__(
        self,
        recurrence: Recurrence,
        *,
        catch_up: CatchUp,
        schedule_delay: timedelta,
        catch_up_window: timedelta,
        max_lateness: timedelta | None,
        limit: int = MAX_CATCH_UP_PLANS,
    ) -> None:
        self.recurrence = recurrence
        self.catch_up = catch_up
        self.schedule_delay = schedule_delay
        self.catch_up_window = catch_up_window
        self.max_lateness = max_lateness
        self.limit = limit
        self._plans: list[datetime] = []
        self._covered_until: datetime | None = None
        self._next: datetime | None = None

    @property
    def next_plan(self) -> datetime | None:
        """The first plan after the horizon of the last :meth:`due` call (None before one)."""
        return self._next

    def due(self, now: datetime) -> DuePlans:
        """The plans due at ``now`` (the database's clock) under the job's catch-up mode."""
        horizon = now - self.schedule_delay
        if self.catch_up == "latest_only":
            self._refresh_latest(horizon)
            candidates = self._plans
        else:
            self._refresh_window(horizon)
            oldest = horizon - self.catch_up_window
            candidates = [p for p in self._plans if p >= oldest]
        if self.max_lateness is None:
            return DuePlans(list(candidates), [])
        deadline = now - self.schedule_delay - self.max_lateness
        return DuePlans(
            [p for p in candidates if p >= deadline], [p for p in candidates if p < deadline]
        )

    def _refresh_latest(self, horizon: datetime) -> None:
        if self._next is not None and self._plans and horizon < self._next:
            return
        latest = self.recurrence.latest_at_or_before(horizon)
        self._plans = [latest] if latest is not None else []
        self._next = self.recurrence.next_after(horizon)

    def _refresh_window(self, horizon: datetime) -> None:
        if self._next is not None and horizon < self._next:
            return
        oldest = horizon - self.catch_up_window
        # plans_between excludes its start; a plan exactly catch_up_window old still counts.
        start = max(self._covered_until or oldest - US, oldest - US)
        if isinstance(self.recurrence, CadenceRecurrence):
            # Never list more than the newest `limit` cadence plans.
            start = max(start, horizon - self.recurrence.every * self.limit)
        fresh = self.recurrence.plans_between(start, horizon)
        self._plans = [p for p in self._plans if p >= oldest] + list(fresh)
        self._plans = self._plans[-self.limit :]
        self._covered_until = horizon
        self._next = self.recurrence.next_after(horizon)


def recurrence_record(recurrence: Recurrence) -> dict[str, object] | None:
    """What a recurrence's plans are computed from, as JSON (``job_state.recurrence``), so a
    caller without the job's code computes the same plans; None for a planner hook or a
    dynamic job, which no record can reproduce."""
    if isinstance(recurrence, CadenceRecurrence):
        return {"every_us": recurrence.every // US}
    if isinstance(recurrence, CronRecurrence):
        return {
            "cron": recurrence.expr,
            "timezone": recurrence.tz.key,
            "dst_repeated": recurrence.dst_repeated,
            "dst_skipped": recurrence.dst_skipped,
        }
    return None


def recurrence_from_record(record: object) -> Recurrence | None:
    """The recurrence :func:`recurrence_record` wrote; None for anything else (no record, or
    one this version cannot read)."""
    if not isinstance(record, dict):
        return None
    try:
        if isinstance(record.get("every_us"), int):
            return CadenceRecurrence(US * record["every_us"])
        if isinstance(record.get("cron"), str):
            return CronRecurrence(
                record["cron"],
                zone(str(record["timezone"])),
                cast(DstRepeated | None, record.get("dst_repeated")),
                cast(DstSkipped | None, record.get("dst_skipped")),
            )
    except (ValueError, KeyError, LookupError):
        return None
    return None


def is_plan(recurrence: Recurrence, instant: datetime) -> bool:
    """Whether ``instant`` is one of ``recurrence``'s plans."""
    return instant in recurrence.plans_between(instant - US, instant)


def count_plans_between(recurrence: Recurrence, start: datetime, end: datetime, cap: int) -> int:
    """How many plans lie in ``(start, end)``, stopping at ``cap`` (skipped-plan counting)."""
    if isinstance(recurrence, CadenceRecurrence):
        count = recurrence.count_between(start, end)
        if recurrence.latest_at_or_before(end) == end:
            count -= 1  # end itself is a plan, and the range excludes it
        return min(cap, max(0, count))
    count = 0
    t = start
    while count < cap:
        nxt = recurrence.next_after(t)
        if nxt is None or nxt >= end:
            break
        count += 1
        t = nxt
    return count


def jitter_offset(
    job: str, kind: str, scope_id: str, plan: datetime, jitter: timedelta
) -> timedelta:
    """A deterministic delay in ``[0, jitter)`` derived from (job, scope, plan_time)."""
    if jitter <= timedelta(0):
        return timedelta(0)
    key = "\x1f".join((job, kind, scope_id, plan.astimezone(UTC).isoformat()))
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    # Integer arithmetic: a float fraction could round up to exactly `jitter`.
    return US * (((jitter // US) * int.from_bytes(digest, "big")) >> 64)


def unique_in_order(items: Iterable[_T]) -> list[_T]:
    """``items`` without repeats, first occurrence kept."""
    return list(dict.fromkeys(items))


def _legacy_cadence(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
