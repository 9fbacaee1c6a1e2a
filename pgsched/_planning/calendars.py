"""Business calendars: which local dates are working days, and the recurrences built on them
(a recurrence filtered or moved onto working days; the n-th working day of a month). Pure:
no I/O, and no clock (a holiday source is read only for the years a window touches).

Moves and ``working_day`` keep a wall time in the job's zone; a wall time that does not exist
on the target day (spring-forward) becomes the first instant after the gap, and an ambiguous
one (fall-back) its first occurrence: the default DST rule of a fixed-hour cron expression.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, date, datetime, time, timedelta
from typing import Literal, TypeGuard, cast
from zoneinfo import ZoneInfo

from .._errors import ConfigError
from .._times import US
from .recurrence import Recurrence, _transition_between, zone

OnExcluded = Literal["skip", "next_working_day", "previous_working_day"]
HolidaySource = object  # a container of dates (``date in it``), or ``year -> dates``
# A calendar search gives up after this many days: a calendar whose weekdays and holidays
# leave no working day never loops; its recurrences yield nothing.
_SEARCH_DAYS = 800
_DAY = timedelta(days=1)
_WINDOWED_FROM = timedelta(hours=1)  # a moving calendar lists upcoming plans by windows
_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def _bad(field: str, value: object, why: str) -> ConfigError:
    return ConfigError(f"Calendar: {field}={value!r} {why}")


def _weekday(token: str, text: object) -> int:
    word = token.strip().lower()
    for names in (_NAMES, _FULL):
        if word in names:
            return names.index(word)
    raise _bad("weekdays", text, f"has {token.strip()!r}, not a weekday (mon, tue, ... sun)")


def parse_weekdays(value: object) -> frozenset[int]:
    """``"mon-fri"``, ``"mon,wed,fri"``, ``"sun-thu"`` (a range may wrap past Sunday), or
    integers 0-6 (Monday is 0)."""
    days: set[int] = set()
    if isinstance(value, str):
        for part in value.split(","):
            first, dash, last = part.partition("-")
            lo = _weekday(first, value)
            hi = _weekday(last, value) if dash else lo
            days.update((lo + i) % 7 for i in range((hi - lo) % 7 + 1))
    else:
        try:
            items = list(cast(Iterable[object], value))
        except TypeError:
            raise _bad("weekdays", value, "must be text such as 'mon-fri' or ints 0-6") from None
        for item in items:
            if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item <= 6:
                raise _bad("weekdays", value, "must hold ints 0-6 (Monday is 0)")
            days.add(item)
    if not days:
        raise _bad("weekdays", value, "has no working weekday")
    return frozenset(days)


def _is_date(value: object) -> bool:
    return isinstance(value, date) and not isinstance(value, datetime)


def parse_ranges(field: str, value: object) -> tuple[tuple[date, date], ...]:
    """Dates and inclusive ``(first, last)`` pairs, as sorted ranges."""
    try:
        items = list(cast(Iterable[object], value))
    except TypeError:
        raise _bad(field, value, "must be a list of dates or (first, last) pairs") from None
    out: list[tuple[date, date]] = []
    for item in items:
        if _is_date(item):
            out.append((cast(date, item), cast(date, item)))
            continue
        pair = tuple(item) if isinstance(item, tuple | list) else ()
        if len(pair) != 2 or not all(_is_date(d) for d in pair):
            raise _bad(field, value, f"has {item!r}, not a date or a (first, last) pair")
        first, last = cast(tuple[date, date], pair)
        if last < first:
            raise _bad(field, value, f"has the range {item!r}, whose last date is first")
        out.append((first, last))
    return tuple(sorted(out))


def _in_ranges(day: date, ranges: tuple[tuple[date, date], ...], starts: list[date]) -> bool:
    i = bisect.bisect_right(starts, day)
    return any(first <= day <= last for first, last in ranges[:i])


def _holiday_identity(source: object) -> str:
    """A source's text in the calendar's key. The ``holidays`` package's objects: their class,
    country, subdivision and categories; a function: its qualified name (what it returns is
    not part of the key: rename it to re-plan); a container of dates: a digest of them."""
    if source is None:
        return "none"
    if hasattr(source, "country") and hasattr(source, "subdiv"):
        cats = sorted(getattr(source, "categories", ()) or ())
        return (
            f"{type(source).__module__}.{type(source).__qualname__}"
            f"({source.country}, {source.subdiv}, {','.join(cats)})"
        )
    if callable(source):
        name = getattr(source, "__qualname__", type(source).__qualname__)
        return f"{getattr(source, '__module__', '?')}.{name}"
    dates = sorted(d.isoformat() for d in cast(Iterable[date], source))
    return "dates:" + hashlib.blake2b(",".join(dates).encode(), digest_size=8).hexdigest()


class Calendar:
    """Working days: ``weekdays`` (``"mon-fri"``, ``"mon,wed,fri"``, ``"sun-thu"``, or ints
    0-6, Monday 0), minus ``holidays`` (a container of dates such as
    ``holidays.country_holidays("DE", subdiv="BY")``, or a function ``year -> dates``), minus
    ``exclude``, plus ``include`` (dates or inclusive ``(first, last)`` pairs; include wins).
    ``timezone``: the IANA zone whose local date says whether an instant is on a working day
    (None: the job's). A value: equal calendars have equal :meth:`key`. Bad input raises
    :class:`ConfigError` naming the field and the value."""

    def __init__(
        self,
        weekdays: str | Iterable[int] = "mon-fri",
        holidays: HolidaySource | None = None,
        exclude: Iterable[date | tuple[date, date]] = (),
        include: Iterable[date | tuple[date, date]] = (),
        timezone: str | None = None,
    ) -> None:
        self.weekdays = parse_weekdays(weekdays)
        if (
            holidays is not None
            and not callable(holidays)
            and not hasattr(holidays, "__contains__")
        ):
            raise _bad("holidays", holidays, "must hold dates or be a function year -> dates")
        self.holidays = holidays
        self.exclude = parse_ranges("exclude", exclude)
        self.include = parse_ranges("include", include)
        self._exclude_starts = [r[0] for r in self.exclude]
        self._include_starts = [r[0] for r in self.include]
        if timezone is not None:
            try:
                zone(timezone)
            except (ValueError, TypeError, OSError, LookupError):
                raise _bad("timezone", timezone, "is not a known IANA time zone") from None
        self.timezone = timezone
        self._years: dict[int, frozenset[date]] = {}  # holiday dates per year, read once

    def key(self) -> str:
        """The calendar as cursors store it: changing any part re-plans the job's future."""
        days = ",".join(_NAMES[d] for d in sorted(self.weekdays))
        ranges = [
            f"{name}=" + ";".join(f"{a}..{b}" if a != b else f"{a}" for a, b in rs)
            for name, rs in (("exclude", self.exclude), ("include", self.include))
        ]
        return (
            f"calendar({days} holidays={_holiday_identity(self.holidays)} {' '.join(ranges)}"
            f" tz={self.timezone or 'job'})"
        )

    describe = key

    def __repr__(self) -> str:
        return f"pgsched.{self.key()}"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Calendar) and other.key() == self.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def in_zone(self, default: str) -> Calendar:
        """This calendar with ``default`` as its zone if it has none (the job's zone)."""
        if self.timezone is not None:
            return self
        zoned = Calendar.__new__(Calendar)
        zoned.__dict__.update(self.__dict__)
        zoned.timezone = default
        return zoned

    def tz(self) -> ZoneInfo:
        return zone(self.timezone or "UTC")

    def _holidays_of(self, year: int) -> frozenset[date]:
        cached = self._years.get(year)
        if cached is not None:
            return cached
        source = self.holidays
        found: set[date] = set()
        if source is None:
            pass
        elif callable(source) and not hasattr(source, "__contains__"):
            for d in cast(Callable[[int], Iterable[object]], source)(year):
                if not _is_date(d):
                    raise _bad("holidays", source, f"returned {d!r} for {year}, not a date")
                found.add(cast(date, d))
        else:
            day, container = date(year, 1, 1), cast(Sequence[object], source)
            while day.year == year:  # `in` per day: lazy sources load the year themselves
                if day in container:
                    found.add(day)
                day += _DAY
        self._years[year] = frozenset(found)
        return self._years[year]

    def is_working_day(self, day: date) -> bool:
        """Whether ``day`` (a local date) is a working day."""
        if _in_ranges(day, self.include, self._include_starts):
            return True
        if day.weekday() not in self.weekdays or day in self._holidays_of(day.year):
            return False
        return not _in_ranges(day, self.exclude, self._exclude_starts)

    def is_working_instant(self, t: datetime) -> bool:
        """Whether the aware instant ``t`` falls on a working day in the calendar's zone."""
        return self.is_working_day(t.astimezone(self.tz()).date())

    def next_working_day(self, day: date) -> date | None:
        """The first working day after ``day``; None if none in about two years."""
        return self._step(day, 1)

    def previous_working_day(self, day: date) -> date | None:
        """The last working day before ``day``; None if none in about two years."""
        return self._step(day, -1)

    def _step(self, day: date, direction: int) -> date | None:
        for i in range(1, _SEARCH_DAYS):
            d = day + _DAY * (i * direction)
            if self.is_working_day(d):
                return d
        return None


def wall_instant(day: date, at: time, tz: ZoneInfo) -> datetime:
    """The UTC instant of wall time ``at`` on ``day`` in ``tz``: the first occurrence of an
    ambiguous one, the first instant after the gap for one that does not exist."""
    first = datetime.combine(day, at, tzinfo=tz)
    instant = first.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) != first.replace(tzinfo=None):
        return _transition_between(tz, first.replace(fold=1).astimezone(UTC), instant)
    return instant


class CalendarRecurrence(Recurrence):
    """``inner``'s plans on working days of ``calendar`` (zoned: its zone or the job's).
    ``skip`` drops a plan on an excluded day; ``next_working_day`` / ``previous_working_day``
    move it, day by day at the same wall time in the job's zone ``tz``, to the first instant
    on a working day. Plans moved onto one instant are one plan."""

    def __init__(
        self, inner: Recurrence, calendar: Calendar, on_excluded: OnExcluded, tz: ZoneInfo
    ) -> None:
        self.inner = inner
        self.calendar = calendar.in_zone(tz.key)
        self.on_excluded: OnExcluded = on_excluded
        self.tz = tz

    def describe(self) -> str:
        return f"{self.inner.describe()} on {self.calendar.describe()} {self.on_excluded}"

    def key(self) -> str:
        return f"{self.inner.key()} | {self.calendar.key()} {self.on_excluded} in {self.tz.key}"

    def moved(self, plan: datetime) -> datetime | None:
        """Where an inner plan runs: itself on a working day, else its move (None: skipped,
        or no working day within the search bound)."""
        if self.calendar.is_working_instant(plan):
            return plan
        if self.on_excluded == "skip":
            return None
        step = 1 if self.on_excluded == "next_working_day" else -1
        wall = plan.astimezone(self.tz)
        for i in range(1, _SEARCH_DAYS):
            day = wall.date() + _DAY * (i * step)
            candidate = wall_instant(day, wall.time(), self.tz)
            if self.calendar.is_working_instant(candidate):
                return candidate
        return None

    def upcoming(self, after: datetime, count: int) -> list[datetime]:
        """The next ``count`` plans. A moving calendar's over an inner recurrence of an hour
        or more come from windows of the inner plans (each listed once and moved), not plan
        by plan: a window of about ``count`` of its intervals, doubled until it holds them.
        The others', step by step: a skipping step passes a run of excluded days at once,
        and a window of a dense recurrence would move every plan of the days around it."""
        interval = self.inner.nominal_interval(after)
        if (
            count <= 0
            or interval is None
            or interval < _WINDOWED_FROM
            or self.on_excluded == "skip"
        ):
            return super().upcoming(after, count)
        span = interval * count * 3 // 2
        found: list[datetime] = []
        start = after
        for _ in range(_SEARCH_DAYS):
            found += self.plans_between(start, start + span)
            if len(found) >= count or start - after > _DAY * _SEARCH_DAYS:
                return found[:count]
            start, span = start + span, span * 2
        return found[:count]

    def next_after(self, t: datetime) -> datetime | None:
        # The first working inner plan after t is a plan; a moved one can only come before it.
        first = self._working_after(t)
        if self.on_excluded == "skip":
            return first
        if first is None:  # no inner plan on a working day, yet moved ones may be: search
            return super().next_after(t)
        if self.on_excluded == "next_working_day" and self.calendar.tz().key == self.tz.key:
            return self._forward_moves(t, first)
        if self._none_moved_before(t, first):
            return first
        return min([first, *self.plans_between(t, first)])

    def _forward_moves(self, t: datetime, first: datetime) -> datetime:
        """The earliest of ``first`` and the plans moved forward into ``(t, first)``: those of
        the excluded days from the run just before ``t``'s day up to ``first``'s. The plans of
        one excluded day all move to one day at their wall times, so one of each is enough:
        its first after ``t``'s wall time when they move onto ``t``'s own (working) day, else
        its first (one step of the inner recurrence per excluded day)."""
        wall = t.astimezone(self.tz)
        day, last = wall.date(), first.astimezone(self.tz).date()
        onto_t = self.calendar.is_working_day(day)
        for _ in range(_SEARCH_DAYS):
            if self.calendar.is_working_day(day - _DAY):
                break
            day -= _DAY
        best = first
        while day < last:
            if not self.calendar.is_working_day(day):
                if onto_t and day < wall.date():  # strictly after t's wall time that day
                    after = wall_instant(day, wall.time(), self.tz)
                else:
                    after = wall_instant(day, time(0), self.tz) - US
                plan = self.inner.next_after(after)
                if plan is not None and plan.astimezone(self.tz).date() == day:
                    moved = self.moved(plan)
                    if moved is not None and t < moved < best:
                        best = moved
            day += _DAY
        return best

    def _none_moved_before(self, t: datetime, first: datetime) -> bool:
        """Whether no plan moved from an excluded day can land in ``(t, first)``: no inner plan
        lies between them, and no excluded day is near enough to move one there (forward onto
        ``t``'s day from the days before it, or backward onto the days up to ``first``'s from
        the day after; a day more each way for a calendar zone other than the job's)."""
        if self.inner.next_after(t) != first:
            return False
        cal_tz = self.calendar.tz()
        lo, hi = t.astimezone(cal_tz).date(), first.astimezone(cal_tz).date()
        if self.on_excluded == "next_working_day":
            first_day, last_day = lo - _DAY, lo
        else:
            first_day, last_day = lo, hi + _DAY
        if cal_tz.key != self.tz.key:
            first_day, last_day = first_day - _DAY, last_day + _DAY
        day = first_day
        while day <= last_day:
            if not self.calendar.is_working_day(day):
                return False
            day += _DAY
        return True

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        last = self._working_at_or_before(t)
        if self.on_excluded == "skip":
            return last
        if last is None:
            return super().latest_at_or_before(t)
        return max([last, *self.plans_between(last, t)])

    def _working_after(self, t: datetime) -> datetime | None:
        return self._working_inner_plan(t, forward=True)

    def _working_at_or_before(self, t: datetime) -> datetime | None:
        return self._working_inner_plan(t, forward=False)

    def _working_inner_plan(self, t: datetime, forward: bool) -> datetime | None:
        """The first inner plan after ``t`` (else the last at or before it) on a working day:
        a run of excluded days is stepped over at once, not plan by plan."""
        step = self.inner.next_after if forward else self.inner.latest_at_or_before
        calendar = self.calendar
        neighbour = calendar.next_working_day if forward else calendar.previous_working_day
        plan, cal_tz = step(t), calendar.tz()
        for _ in range(_SEARCH_DAYS):
            if plan is None or self.calendar.is_working_instant(plan):
                return plan
            day = neighbour(plan.astimezone(cal_tz).date())
            if day is None:
                return None
            # Just before the working day begins, or (backward) just before it ends.
            plan = step(wall_instant(day if forward else day + _DAY, time(0), cal_tz) - US)
        return None

    def _widened(self, start: datetime, end: datetime) -> tuple[datetime, datetime]:
        """The inner window whose plans can land in ``(start, end]``: a move goes forward
        (or backward) over the run of excluded days at that edge; two days more cover a
        move whose calendar date jumps a day across a DST change of the job's zone."""
        if self.on_excluded == "skip":
            return start, end
        cal_tz = self.calendar.tz()
        if self.on_excluded == "next_working_day":
            day = start.astimezone(cal_tz).date()
            for _ in range(_SEARCH_DAYS):
                if self.calendar.is_working_day(day - _DAY):
                    break
                day -= _DAY
            return datetime.combine(day - 2 * _DAY, time(0), tzinfo=cal_tz).astimezone(UTC), end
        day = end.astimezone(cal_tz).date()
        for _ in range(_SEARCH_DAYS):
            if self.calendar.is_working_day(day + _DAY):
                break
            day += _DAY
        return start, datetime.combine(day + 3 * _DAY, time(0), tzinfo=cal_tz).astimezone(UTC)

    def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
        if end <= start:
            return []
        lo, hi = self._widened(start, end)
        found = {self.moved(p) for p in self.inner.plans_between(lo, hi)}
        return sorted(p for p in found if p is not None and start < p <= end)

    def excluded_runs(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
        """Each run of consecutive excluded days (local dates of the calendar's zone) that
        meets ``(start, end]``, as the instants ``[its first midnight, the next working day's
        midnight)``."""
        tz, runs = self.calendar.tz(), []
        day, last = start.astimezone(tz).date(), end.astimezone(tz).date()
        first: date | None = None
        while day <= last:
            if not self.calendar.is_working_day(day):
                first = first or day
            elif first is not None:
                runs.append((wall_instant(first, time(0), tz), wall_instant(day, time(0), tz)))
                first = None
            day += _DAY
        if first is not None:
            runs.append((wall_instant(first, time(0), tz), wall_instant(day, time(0), tz)))
        return runs

    def excluded_between(self, start: datetime, end: datetime) -> list[datetime]:
        """The inner plans in ``(start, end]`` on excluded days (each skipped, or moved)."""
        return [
            p
            for p in self.inner.plans_between(start, end)
            if not self.calendar.is_working_instant(p)
        ]


def skips_excluded(recurrence: Recurrence | None) -> TypeGuard[CalendarRecurrence]:
    """Whether ``recurrence`` is a calendar's that skips the plans on excluded days (the ones
    recorded and explained as ``excluded``; a moving calendar skips none)."""
    return isinstance(recurrence, CalendarRecurrence) and recurrence.on_excluded == "skip"


_AT = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")


class WorkingDay(Recurrence):
    """The ``n``-th working day of each month (``n <= -1`` from the end) at wall time ``at``
    in the job's zone: among the days of the month (in the job's zone), those whose instant
    at ``at`` falls on a working day of the calendar (in its zone, else the job's)."""

    def __init__(self, n: int, at: time, calendar: Calendar, tz: ZoneInfo | None = None) -> None:
        self.n, self.at, self.tz = n, at, tz or zone("UTC")
        self.calendar = calendar.in_zone(self.tz.key)
        self._raw_calendar = calendar
        self._months: dict[tuple[int, int], datetime | None] = {}  # plan_of, computed once

    def in_job_timezone(self, tz: ZoneInfo) -> WorkingDay:
        """This planner in the job's zone (the job calls it when it is built)."""
        return WorkingDay(self.n, self.at, self._raw_calendar, tz)

    def describe(self) -> str:
        return (
            f"working_day({self.n}, at={self.at.isoformat()}) {self.tz.key} {self.calendar.key()}"
        )

    def plan_of(self, year: int, month: int) -> datetime | None:
        """The month's plan, or None when it has fewer than ``|n|`` working days."""
        if (year, month) in self._months:
            return self._months[year, month]
        if len(self._months) >= _MONTHS_KEPT:
            self._months.clear()
        plan = self._months[year, month] = self._compute_plan(year, month)
        return plan

    def next_after(self, t: datetime) -> datetime | None:
        start = (t - 2 * _DAY).astimezone(self.tz).date()
        for year, month in _months(start, t + _DAY * _SEARCH_DAYS):
            plan = self.plan_of(year, month)
            if plan is not None and plan > t:
                return plan
        return None

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        year, month = (t + 2 * _DAY).astimezone(self.tz).date().timetuple()[:2]
        for _ in range(_SEARCH_DAYS // 28):
            plan = self.plan_of(year, month)
            if plan is not None and plan <= t:
                return plan
            year, month = (year, month - 1) if month > 1 else (year - 1, 12)
        return None

    def _compute_plan(self, year: int, month: int) -> datetime | None:
        day, instants = date(year, month, 1), []
        while day.month == month:
            instant = wall_instant(day, self.at, self.tz)
            if self.calendar.is_working_instant(instant):
                instants.append(instant)
            day += _DAY
        index = self.n - 1 if self.n > 0 else self.n
        return instants[index] if -len(instants) <= index < len(instants) else None

    def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
        if end <= start:
            return []
        out = []
        for year, month in _months((start - 2 * _DAY).astimezone(self.tz).date(), end + 2 * _DAY):
            plan = self.plan_of(year, month)
            if plan is not None and start < plan <= end:
                out.append(plan)
        return out


_MONTHS_KEPT = 1200  # a hundred years of a working_day planner's plans


def _months(first: date, end: datetime) -> Iterator[tuple[int, int]]:
    year, month = first.year, first.month
    last = end.astimezone(UTC).date()
    while (year, month) <= (last.year, last.month):
        yield year, month
        year, month = (year, month + 1) if month < 12 else (year + 1, 1)


def working_day(n: int, at: str | time = "18:00", calendar: Calendar | None = None) -> WorkingDay:
    """A ``planner=`` for the ``n``-th working day of each month at wall time ``at`` (``"HH:MM"``
    or a ``datetime.time``) in the job's ``timezone``: ``n >= 1`` counts from the start, ``-1``
    is the last working day. ``calendar`` defaults to ``Calendar()`` (Monday to Friday); a
    month with fewer than ``|n|`` working days has no plan."""
    if not isinstance(n, int) or isinstance(n, bool) or n == 0 or not -31 <= n <= 31:
        raise ConfigError(f"working_day: n={n!r} must be a nonzero integer from -31 to 31")
    if isinstance(at, str) and (m := _AT.match(at)) and int(m[1]) < 24 and int(m[2]) < 60:
        wall = time(int(m[1]), int(m[2]), int(m[3] or 0))
    elif isinstance(at, time) and at.tzinfo is None:
        wall = at
    else:
        raise ConfigError(f"working_day: at={at!r} must be a wall time such as '18:00'")
    if calendar is not None and not isinstance(calendar, Calendar):
        raise ConfigError(f"working_day: calendar={calendar!r} must be a pgsched.Calendar")
    return WorkingDay(n, wall, calendar or Calendar())
