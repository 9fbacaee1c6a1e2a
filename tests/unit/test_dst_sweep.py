"""A DST sweep (the README's DST rules): every UTC-offset change from 2020 to 2035 in six zones.

For each transition the local day(s) it touches and the day before (a control) are checked:
the plans pgsched lists for the day must be exactly those an independent oracle derives
from the README's two DST rules, and so must their number:

- an expression whose hour field is ``*`` or a step follows elapsed time: every real instant
  whose local wall time matches fires (oracle: a minute-by-minute scan of real instants);
- any other expression fires at each matching wall time of the local day exactly once: a wall
  time skipped by spring-forward at the first instant after the gap, a repeated one at its
  first occurrence (oracle: enumerate the day's wall times and map each to its instants).
  Wall times that land on the same instant are one plan (a plan is an instant).

The oracle uses only the tz database (``zoneinfo``) and a small cron-field matcher of its own;
transitions are found by scanning the zone's UTC offsets day by day and bisecting to the
second. Zones: 1-hour shifts at 01:00Z (Berlin) and 02:00 local (New York), a 30-minute shift
(Lord Howe), and midnight transitions (Asunción, which stopped changing in October 2024;
Beirut, whose fall-back repeats 23:00 of the previous day; Havana, which falls back at 01:00).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest

from pgsched._planning.recurrence import CronRecurrence

SECOND = timedelta(seconds=1)
MINUTE = timedelta(minutes=1)
DAY = timedelta(days=1)
SWEEP_START = datetime(2020, 1, 1, tzinfo=UTC)
SWEEP_END = datetime(2036, 1, 1, tzinfo=UTC)

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Asuncion",
    "Asia/Beirut",
    "America/Havana",
]
EXPRS = ["30 2 * * *", "0 * * * *", "*/15 1-3 * * *"]
# Extra expressions that put the midnight transitions of Asunción, Beirut and Havana under
# the fixed-hour rule (the three above never match a wall time those transitions touch).
MIDNIGHT_EXPRS = ["0 0 * * *", "30 0 * * *", "30 23 * * *", "0 */2 * * *"]


# -- the oracle -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Transition:
    at: datetime  # the first instant with the new offset
    before: timedelta
    after: timedelta

    @property
    def kind(self) -> str:
        return "spring" if self.after > self.before else "fall"


@functools.cache
def transitions(zone: str) -> tuple[Transition, ...]:
    """Every UTC-offset change of ``zone`` in the sweep, found day by day and bisected."""
    tz = ZoneInfo(zone)
    out = []
    t = SWEEP_START
    offset = t.astimezone(tz).utcoffset()
    while t < SWEEP_END:
        nxt = t + DAY
        new = nxt.astimezone(tz).utcoffset()
        if new != offset:
            lo, hi = 0, 86400  # seconds after t: offset(lo) == old, offset(hi) == new
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if (t + mid * SECOND).astimezone(tz).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            assert offset is not None and new is not None
            out.append(Transition(t + hi * SECOND, offset, new))
            offset = new
        t = nxt
    return tuple(out)


def _field(spec: str, lo: int, hi: int) -> frozenset[int]:
    """Values of one cron field: ``*``, ``N``, ``A-B``, with an optional ``/STEP``, in lists."""
    values: set[int] = set()
    for part in spec.split(","):
        rng, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if rng == "*":
            a, b = lo, hi
        elif "-" in rng:
            a, b = (int(x) for x in rng.split("-"))
        else:
            a = int(rng)
            b = hi if step_text else a
        values.update(range(a, b + 1, step))
    return frozenset(values)


@dataclass(frozen=True)
class Expr:
    """A minute/hour cron expression (day, month and weekday ``*``), matched by the oracle."""

    text: str

    @functools.cached_property
    def fields(self) -> tuple[str, ...]:
        fields = tuple(self.text.split())
        assert len(fields) == 5 and fields[2:] == ("*", "*", "*"), self.text
        return fields

    @property
    def minutes(self) -> frozenset[int]:
        return _field(self.fields[0], 0, 59)

    @property
    def hours(self) -> frozenset[int]:
        return _field(self.fields[1], 0, 23)

    @property
    def follows_elapsed_time(self) -> bool:
        return self.fields[1] == "*" or "/" in self.fields[1]

    def matches(self, wall: datetime) -> bool:
        return wall.second == 0 and wall.minute in self.minutes and wall.hour in self.hours

    def walls(self, day: date) -> list[datetime]:
        return [
            datetime.combine(day, time(h, m))
            for h in sorted(self.hours)
            for m in sorted(self.minutes)
        ]


def wall(u: datetime, tz: ZoneInfo) -> datetime:
    """The naive local wall time of instant ``u``."""
    return u.astimezone(tz).replace(tzinfo=None)


def elapsed_rule(expr: Expr, tz: ZoneInfo, day: date, tr: Transition) -> list[datetime]:
    """Every whole-minute instant whose local date is ``day`` and local time matches."""
    offsets = (tr.before, tr.after)
    u = (datetime.combine(day, time(0)) - max(offsets)).replace(tzinfo=UTC)
    end = (datetime.combine(day + DAY, time(0)) - min(offsets)).replace(tzinfo=UTC)
    out = []
    while u <= end:
        w = wall(u, tz)
        if w.date() == day and expr.matches(w):
            out.append(u)
        u += MINUTE
    return out


def fixed_hour_rule(expr: Expr, tz: ZoneInfo, day: date, tr: Transition) -> list[datetime]:
    """Each matching wall time once: its first occurrence, or the end of the gap it lies in;
    the instants whose local date is ``day`` (wall times of the days around are included,
    since a shifted one may cross midnight)."""
    found = set()
    for d in (day - DAY, day, day + DAY):
        for w in expr.walls(d):
            occurrences = sorted(
                u
                for u in {(w - o).replace(tzinfo=UTC) for o in (tr.before, tr.after)}
                if wall(u, tz) == w
            )
            if occurrences:
                u = occurrences[0]
            else:  # skipped: it must lie in this transition's gap
                assert wall(tr.at - SECOND, tz) < w < wall(tr.at, tz), (w, tr)
                u = tr.at
            if wall(u, tz).date() == day:
                found.add(u)
    return sorted(found)


def oracle(expr: Expr, tz: ZoneInfo, day: date, tr: Transition) -> list[datetime]:
    rule = elapsed_rule if expr.follows_elapsed_time else fixed_hour_rule
    return rule(expr, tz, day, tr)


def days_of(tr: Transition, tz: ZoneInfo) -> list[date]:
    """The local day(s) the transition touches (two when it jumps over midnight)."""
    return sorted({wall(tr.at - SECOND, tz).date(), wall(tr.at, tz).date()})


def pgsched_by_day(schedule: CronRecurrence, days: list[date]) -> dict[date, list[datetime]]:
    tz = schedule.tz
    lo = datetime.combine(days[0] - 2 * DAY, time(0), tzinfo=UTC)
    hi = datetime.combine(days[-1] + 2 * DAY, time(0), tzinfo=UTC)
    out: dict[date, list[datetime]] = defaultdict(list)
    for p in schedule.plans_between(lo, hi):
        assert p.utcoffset() == timedelta(0)
        out[wall(p, tz).date()].append(p)
    return out


def sweep(zone: str, text: str) -> tuple[int, list[str]]:
    """(days checked, mismatches) of ``text`` in ``zone`` over every transition."""
    tz = ZoneInfo(zone)
    expr = Expr(text)
    schedule = CronRecurrence(text, tz)
    checked, problems = 0, []
    for tr in transitions(zone):
        days = days_of(tr, tz)
        control = days[0] - DAY
        got = pgsched_by_day(schedule, [control, *days])
        for day in (control, *days):
            want = oracle(expr, tz, day, tr)
            checked += 1
            if got[day] != want:
                problems.append(
                    f"{zone} {text!r} {day} ({'control' if day == control else tr.kind} "
                    f"at {tr.at:%Y-%m-%dT%H:%M}Z, {tr.before} -> {tr.after}): "
                    f"pgsched {len(got[day])} {_hm(got[day], tz)}, "
                    f"oracle {len(want)} {_hm(want, tz)}"
                )
    return checked, problems


def _hm(instants: list[datetime], tz: ZoneInfo) -> list[str]:
    return [f"{wall(u, tz):%H:%M}{'+' if u.astimezone(tz).fold else ''}" for u in instants]


# -- the transitions themselves ---------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
def test_the_scan_finds_every_transition_of_the_sweep(zone: str) -> None:
    found = transitions(zone)
    tz = ZoneInfo(zone)
    kinds = [tr.kind for tr in found]
    # alternating spring / fall, each a real change of offset at a whole second
    assert all(a != b for a, b in pairwise(kinds)), kinds
    for tr in found:
        assert (tr.at - SECOND).astimezone(tz).utcoffset() == tr.before
        assert tr.at.astimezone(tz).utcoffset() == tr.after
        assert tr.at.microsecond == 0
    if zone == "America/Asuncion":
        # Paraguay kept UTC-3 all year from October 2024 (tzdata 2024b); older data goes on.
        assert len(found) in (10, 32), [tr.at for tr in found]
        assert found[0].at.year == 2020
    else:
        assert len(found) == 32  # two a year, 2020-2035
        assert {tr.at.year for tr in found} == set(range(2020, 2036))
    shifts = {abs(tr.after - tr.before) for tr in found}
    if zone == "Australia/Lord_Howe":
        assert shifts == {timedelta(minutes=30)}
    else:
        assert shifts == {timedelta(hours=1)}


# -- the oracle agrees with counts derived by hand from the DST rules ---------------------------

# (zone, expression, local day) -> fires that day, reasoned from the DST rules without any code.
HAND_COUNTS = [
    # Berlin 2027-03-28: 02:00 -> 03:00. Hourly loses 02:00; 02:30 shifts to 03:00;
    # 02:00-02:45 all shift to 03:00, which is also a wall time of its own: 4 + 1 + 3.
    ("Europe/Berlin", "0 * * * *", date(2027, 3, 28), 23),
    ("Europe/Berlin", "30 2 * * *", date(2027, 3, 28), 1),
    ("Europe/Berlin", "*/15 1-3 * * *", date(2027, 3, 28), 8),
    # Berlin 2027-10-31: 03:00 -> 02:00. Hourly has 02:00 twice; fixed ones fire once.
    ("Europe/Berlin", "0 * * * *", date(2027, 10, 31), 25),
    ("Europe/Berlin", "30 2 * * *", date(2027, 10, 31), 1),
    ("Europe/Berlin", "*/15 1-3 * * *", date(2027, 10, 31), 12),
    # New York 2027-11-07: 02:00 -> 01:00 repeats 01:xx.
    ("America/New_York", "0 * * * *", date(2027, 11, 7), 25),
    ("America/New_York", "*/15 1-3 * * *", date(2027, 11, 7), 12),
    # Lord Howe 2027-10-03: 02:00 -> 02:30: 02:00 and 02:15 shift onto 02:30 (10 plans);
    # hourly loses 02:00. 2027-04-04: 02:00 -> 01:30 repeats 01:30-01:59, no whole hour.
    ("Australia/Lord_Howe", "*/15 1-3 * * *", date(2027, 10, 3), 10),
    ("Australia/Lord_Howe", "0 * * * *", date(2027, 10, 3), 23),
    ("Australia/Lord_Howe", "0 * * * *", date(2027, 4, 4), 24),
    ("Australia/Lord_Howe", "30 2 * * *", date(2027, 4, 4), 1),
    # Beirut 2027-10-30 (Saturday): 24:00 -> 23:00 repeats 23:xx of that day.
    ("Asia/Beirut", "0 * * * *", date(2027, 10, 30), 25),
    ("Asia/Beirut", "30 23 * * *", date(2027, 10, 30), 1),
    # Beirut 2027-03-28: 00:00 -> 01:00, so hour 0 is skipped: midnight shifts to 01:00.
    ("Asia/Beirut", "0 * * * *", date(2027, 3, 28), 23),
    ("Asia/Beirut", "0 0 * * *", date(2027, 3, 28), 1),
    ("Asia/Beirut", "30 0 * * *", date(2027, 3, 28), 1),
    # Havana 2027-03-14: 00:00 -> 01:00; 2027-11-07: 01:00 -> 00:00 repeats hour 0.
    ("America/Havana", "0 * * * *", date(2027, 3, 14), 23),
    ("America/Havana", "0 0 * * *", date(2027, 3, 14), 1),
    ("America/Havana", "0 * * * *", date(2027, 11, 7), 25),
    ("America/Havana", "30 0 * * *", date(2027, 11, 7), 1),
    ("America/Havana", "0 */2 * * *", date(2027, 11, 7), 13),
    # Asunción 2024-03-24: 00:00 -> 23:00 of the 23rd; 2023-10-01: 00:00 -> 01:00.
    ("America/Asuncion", "0 * * * *", date(2024, 3, 23), 25),
    ("America/Asuncion", "30 23 * * *", date(2024, 3, 23), 1),
    ("America/Asuncion", "0 * * * *", date(2023, 10, 1), 23),
    ("America/Asuncion", "0 0 * * *", date(2023, 10, 1), 1),
]


@pytest.mark.parametrize(("zone", "text", "day", "count"), HAND_COUNTS)
def test_the_oracle_gives_the_counts_reasoned_by_hand(
    zone: str, text: str, day: date, count: int
) -> None:
    tz = ZoneInfo(zone)
    (tr,) = [t for t in transitions(zone) if day in days_of(t, tz)]
    assert len(oracle(Expr(text), tz, day, tr)) == count
    assert len(oracle(Expr(text), tz, day - 7 * DAY, tr)) in (1, 12, 24)  # an ordinary day


# -- the sweep --------------------------------------------------------------------------------

NORMAL = {"30 2 * * *": 1, "0 * * * *": 24, "*/15 1-3 * * *": 12}


@pytest.mark.parametrize("text", EXPRS)
@pytest.mark.parametrize("zone", ZONES)
def test_fires_per_local_day_on_every_transition_2020_2035(zone: str, text: str) -> None:
    checked, problems = sweep(zone, text)
    assert checked >= 2 * len(transitions(zone)), checked
    assert not problems, "\n".join(problems)
    # the control days are ordinary days
    tz = ZoneInfo(zone)
    for tr in transitions(zone):
        control = days_of(tr, tz)[0] - DAY
        assert len(oracle(Expr(text), tz, control, tr)) == NORMAL[text]


@pytest.mark.parametrize("text", MIDNIGHT_EXPRS)
@pytest.mark.parametrize("zone", ["America/Asuncion", "Asia/Beirut", "America/Havana"])
def test_midnight_transitions_under_both_rules(zone: str, text: str) -> None:
    _, problems = sweep(zone, text)
    assert not problems, "\n".join(problems)
