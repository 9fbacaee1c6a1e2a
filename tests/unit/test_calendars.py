"""Business calendars: working days, plans skipped or moved off excluded days, the n-th
working day of a month, and their keys and errors."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo

import holidays as holidays_package
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pgsched
from pgsched._planning.calendars import CalendarRecurrence, OnExcluded
from pgsched._planning.recurrence import (
    CadenceRecurrence,
    CronRecurrence,
    HookRecurrence,
    Recurrence,
)
from tests.support.plans import FixedPlans

BERLIN = ZoneInfo("Europe/Berlin")
UTC_ZONE = ZoneInfo("UTC")


def utc(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=UTC)


def berlin(year: int, month: int, day: int, hour: int = 0) -> datetime:
    return datetime(year, month, day, hour, tzinfo=BERLIN).astimezone(UTC)


def daily(at: str, tz: ZoneInfo = BERLIN) -> CronRecurrence:
    hour, minute = at.split(":")
    return CronRecurrence(f"{int(minute)} {int(hour)} * * *", tz)


def job(recurrence: Recurrence, on_excluded: OnExcluded, **calendar: Any) -> CalendarRecurrence:
    tz = getattr(recurrence, "tz", UTC_ZONE)
    return CalendarRecurrence(recurrence, pgsched.Calendar(**calendar), on_excluded, tz)


FRIDAY_HOLIDAY = {date(2026, 5, 1): "Labour day"}  # a Friday
# (inner, on_excluded, calendar, window, expected plans)
CASES: list[
    tuple[str, Recurrence, OnExcluded, dict[str, Any], datetime, datetime, list[datetime]]
] = [
    (
        "weekends skipped",
        daily("09:00"),
        "skip",
        {},
        berlin(2026, 1, 2, 0),  # a Friday
        berlin(2026, 1, 6, 0),
        [berlin(2026, 1, 2, 9), berlin(2026, 1, 5, 9)],
    ),
    (
        "a holiday on a Friday moves to Monday",
        daily("09:00"),
        "next_working_day",
        {"holidays": FRIDAY_HOLIDAY},
        berlin(2026, 4, 30, 12),
        berlin(2026, 5, 5, 0),
        [berlin(2026, 5, 4, 9)],
    ),
    (
        "a holiday on a Friday moves to Thursday",
        daily("09:00"),
        "previous_working_day",
        {"holidays": FRIDAY_HOLIDAY},
        berlin(2026, 4, 29, 12),
        berlin(2026, 5, 4, 12),
        [berlin(2026, 4, 30, 9), berlin(2026, 5, 4, 9)],
    ),
    (
        "Saturday, Sunday and Monday are one plan",
        daily("09:00"),
        "next_working_day",
        {},
        berlin(2026, 1, 2, 12),
        berlin(2026, 1, 6, 0),
        [berlin(2026, 1, 5, 9)],
    ),
    (
        "a move across a month end",
        daily("09:00"),
        "next_working_day",
        {},
        berlin(2026, 1, 30, 12),  # Friday; Jan 31 and Feb 1 are the weekend
        berlin(2026, 2, 2, 12),
        [berlin(2026, 2, 2, 9)],
    ),
    (
        "a move across spring-forward keeps the wall time",
        daily("09:00"),
        "next_working_day",
        {},
        berlin(2026, 3, 27, 12),  # Friday; DST starts Sunday March 29
        berlin(2026, 3, 30, 12),
        [utc(2026, 3, 30, 7)],  # 09:00 CEST: the offset is +2 now, it was +1 on Saturday
    ),
    (
        "include wins over a holiday",
        daily("09:00"),
        "skip",
        {"holidays": FRIDAY_HOLIDAY, "include": [date(2026, 5, 1)]},
        berlin(2026, 4, 30, 12),
        berlin(2026, 5, 2, 0),
        [berlin(2026, 5, 1, 9)],
    ),
    (
        "an excluded range, inclusive",
        daily("09:00"),
        "skip",
        {"exclude": [(date(2026, 1, 5), date(2026, 1, 7))]},
        berlin(2026, 1, 4, 0),
        berlin(2026, 1, 9, 0),
        [berlin(2026, 1, 8, 9)],
    ),
    (
        "a calendar in Tokyo for a job in UTC: 23:00 UTC Friday is Saturday there",
        daily("23:00", UTC_ZONE),
        "skip",
        {"timezone": "Asia/Tokyo"},
        utc(2026, 1, 1, 0),  # Thursday
        utc(2026, 1, 6, 0),
        [utc(2026, 1, 1, 23), utc(2026, 1, 4, 23), utc(2026, 1, 5, 23)],  # Fri, Mon, Tue there
    ),
    (
        "sun-thu weekdays",
        daily("09:00"),
        "skip",
        {"weekdays": "sun-thu"},
        berlin(2026, 1, 1, 12),  # Thursday
        berlin(2026, 1, 5, 0),
        [berlin(2026, 1, 4, 9)],
    ),
]


@pytest.mark.parametrize(
    ("inner", "on_excluded", "calendar", "start", "end", "expected"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_plans_on_a_calendar(
    inner: Recurrence,
    on_excluded: OnExcluded,
    calendar: dict[str, Any],
    start: datetime,
    end: datetime,
    expected: list[datetime],
) -> None:
    assert job(inner, on_excluded, **calendar).plans_between(start, end) == expected


def test_excluded_plans_of_a_window() -> None:
    rec = job(daily("09:00"), "skip")
    excluded = rec.excluded_between(berlin(2026, 1, 2, 0), berlin(2026, 1, 6, 0))
    assert excluded == [berlin(2026, 1, 3, 9), berlin(2026, 1, 4, 9)]


WORKING_DAY_CASES = [
    # (n, calendar, month, expected day at 18:00 Berlin)
    (-1, {}, (2026, 1), date(2026, 1, 30)),  # January 31 2026 is a Saturday
    (-1, {"holidays": {date(2026, 12, 31): "New Year's Eve"}}, (2026, 12), date(2026, 12, 30)),
    (-1, {}, (2026, 5), date(2026, 5, 29)),  # May 30-31 2026: the weekend
    (3, {}, (2026, 1), date(2026, 1, 5)),  # Thu 1, Fri 2, Mon 5
    (3, {"holidays": {date(2026, 1, 1): "New Year"}}, (2026, 1), date(2026, 1, 6)),
    (1, {"weekdays": "sat"}, (2026, 2), date(2026, 2, 7)),
]


@pytest.mark.parametrize(("n", "calendar", "month", "expected"), WORKING_DAY_CASES)
def test_working_day(
    n: int, calendar: dict[str, Any], month: tuple[int, int], expected: date
) -> None:
    planner = pgsched.working_day(n, at="18:00", calendar=pgsched.Calendar(**calendar))
    spec = pgsched.Scheduler(dsn="postgresql://x@localhost/x").register(
        lambda run: None, name="w", planner=planner, timezone="Europe/Berlin"
    )
    first = datetime(*month, 1, tzinfo=BERLIN).astimezone(UTC)
    plans = spec.recurrence.plans_between(first, first + timedelta(days=31))
    assert plans[0] == datetime.combine(expected, datetime.min.time(), BERLIN).replace(
        hour=18
    ).astimezone(UTC)


def test_a_month_without_enough_working_days_has_no_plan() -> None:
    planner = pgsched.working_day(23)  # February has at most 20 weekdays
    assert planner.plans_between(utc(2026, 2, 1), utc(2026, 3, 1)) == []


def test_holidays_package_bavaria() -> None:
    calendar = pgsched.Calendar(holidays=holidays_package.country_holidays("DE", subdiv="BY"))
    assert not calendar.is_working_day(date(2026, 1, 6))  # Epiphany, a Tuesday
    assert calendar.is_working_day(date(2026, 1, 7))
    assert calendar.next_working_day(date(2026, 1, 5)) == date(2026, 1, 7)
    assert calendar.previous_working_day(date(2026, 1, 7)) == date(2026, 1, 5)
    assert "DE, BY, public" in calendar.key()


def test_callable_holidays() -> None:
    def company(year: int) -> list[date]:
        return [date(year, 12, 24)]

    calendar = pgsched.Calendar(holidays=company)
    assert not calendar.is_working_day(date(2027, 12, 24))
    assert "company" in calendar.key()


def test_the_key_changes_with_calendar_and_on_excluded() -> None:
    s = pgsched.Scheduler(dsn="postgresql://x@localhost/x")
    keys = {
        s.register(lambda run: None, name=f"j{i}", cron="0 9 * * *", **options).recurrence.key()
        for i, options in enumerate(
            cast(
                list[dict[str, Any]],
                [
                    {},
                    {"calendar": pgsched.Calendar()},
                    {"calendar": pgsched.Calendar(), "on_excluded": "next_working_day"},
                    {"calendar": pgsched.Calendar(weekdays="mon-thu")},
                    {"calendar": pgsched.Calendar(exclude=[date(2026, 1, 2)])},
                    {"calendar": pgsched.Calendar(holidays={date(2026, 1, 2): "x"})},
                    {"calendar": pgsched.Calendar(timezone="Asia/Tokyo")},
                ],
            )
        )
    }
    assert len(keys) == 7
    assert pgsched.Calendar(weekdays="mon-fri") == pgsched.Calendar(weekdays=[4, 3, 2, 1, 0])


BAD_CALENDARS = [
    ({"weekdays": "mon-fry"}, "Calendar: weekdays='mon-fry' has 'fry', not a weekday"),
    ({"weekdays": [7]}, "Calendar: weekdays=[7] must hold ints 0-6"),
    ({"weekdays": ""}, "Calendar: weekdays='' has '', not a weekday"),
    ({"exclude": ["2026-01-01"]}, "Calendar: exclude=['2026-01-01'] has '2026-01-01', not a date"),
    (
        {"include": [datetime(2026, 1, 1)]},
        "Calendar: include=[datetime.datetime(2026, 1, 1, 0, 0)] has",
    ),
    ({"timezone": "Mars/Base"}, "Calendar: timezone='Mars/Base' is not a known IANA time zone"),
    ({"holidays": 3}, "Calendar: holidays=3 must hold dates"),
]


@pytest.mark.parametrize(("options", "message"), BAD_CALENDARS)
def test_bad_calendar_is_one_line(options: dict[str, Any], message: str) -> None:
    with pytest.raises(pgsched.ConfigError) as err:
        pgsched.Calendar(**options)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


BAD_JOBS = [
    (
        {"on_excluded": "next_working_day"},
        "job 'j': on_excluded='next_working_day' needs calendar=",
    ),
    (
        {"calendar": pgsched.Calendar(), "on_excluded": "tomorrow"},
        "job 'j': on_excluded='tomorrow' must be one of",
    ),
    ({"calendar": "mon-fri"}, "job 'j': calendar='mon-fri' must be a pgsched.Calendar"),
]


@pytest.mark.parametrize(("options", "message"), BAD_JOBS)
def test_bad_job_calendar_option_is_one_line(options: dict[str, Any], message: str) -> None:
    s = pgsched.Scheduler(dsn="postgresql://x@localhost/x")
    with pytest.raises(pgsched.ConfigError) as err:
        s.register(lambda run: None, name="j", cron="0 9 * * *", **options)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_a_dynamic_job_refuses_a_calendar() -> None:
    s = pgsched.Scheduler(dsn="postgresql://x@localhost/x")
    with pytest.raises(pgsched.ConfigError, match=r"calendar=.* cannot be given with dynamic"):
        s.register(lambda run: None, name="d", dynamic=True, calendar=pgsched.Calendar())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0,), "working_day: n=0 must be a nonzero integer"),
        ((1, "25:00"), "working_day: at='25:00' must be a wall time"),
    ],
)
def test_bad_working_day(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(pgsched.ConfigError, match=message):
        pgsched.working_day(*args)


# -- properties --------------------------------------------------------------------------------

ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Tokyo"]
calendars = st.builds(
    pgsched.Calendar,
    weekdays=st.sets(st.integers(0, 6), min_size=1),
    holidays=st.sets(st.dates(date(2026, 1, 1), date(2026, 12, 31)), max_size=20),
    exclude=st.lists(st.dates(date(2026, 1, 1), date(2026, 12, 31)), max_size=5),
    timezone=st.sampled_from([None, *ZONES]),
)
inners = st.one_of(
    st.builds(
        CronRecurrence,
        st.sampled_from(
            ["0 9 * * *", "30 2 * * *", "0 */6 * * *", "15 23 * * 1-5", "*/30 8-9 * * *"]
        ),
        st.sampled_from(ZONES).map(ZoneInfo),
    ),
    st.sampled_from([timedelta(hours=5), timedelta(hours=24)]).map(CadenceRecurrence),
)
windows = st.tuples(
    st.datetimes(datetime(2026, 1, 1), datetime(2026, 11, 1), timezones=st.just(UTC)),
    st.timedeltas(timedelta(hours=1), timedelta(days=20)),
    st.floats(0, 1),
)


@settings(max_examples=150, deadline=None)
@given(
    calendar=calendars,
    inner=inners,
    on_excluded=st.sampled_from(["skip", "next_working_day", "previous_working_day"]),
    window=windows,
)
def test_calendar_plans_are_working_and_window_consistent(
    calendar: pgsched.Calendar,
    inner: Recurrence,
    on_excluded: OnExcluded,
    window: tuple[datetime, timedelta, float],
) -> None:
    start, length, cut = window
    end = start + length
    tz = getattr(inner, "tz", UTC_ZONE)
    rec = CalendarRecurrence(inner, calendar, on_excluded, tz)
    plans = rec.plans_between(start, end)
    assert plans == sorted(set(plans))
    assert all(start < p <= end for p in plans)
    assert all(rec.calendar.is_working_instant(p) for p in plans)
    inner_plans = inner.plans_between(start, end)
    kept = [p for p in inner_plans if rec.calendar.is_working_instant(p)]
    assert set(kept) <= set(plans)  # no plan on a working day is lost
    if on_excluded == "skip":
        assert plans == kept
    middle = start + (end - start) * cut
    assert rec.plans_between(start, middle) + rec.plans_between(middle, end) == plans
    # The steps (next_after skips a run of excluded days at once) agree with the window.
    later, earlier = [p for p in plans if p > middle], [p for p in plans if p <= middle]
    assert rec.upcoming(middle, len(later)) == later
    if later:
        assert rec.next_after(middle) == later[0]
    if earlier:
        assert rec.latest_at_or_before(middle) == earlier[-1]


@pytest.mark.parametrize("on_excluded", ["next_working_day", "previous_working_day"])
def test_plans_all_moved_off_excluded_days_are_found_one_step_at_a_time(
    on_excluded: OnExcluded,
) -> None:
    # Weekday plans, Saturday the only working day: every plan is a moved one (found by
    # Hypothesis: the step from a working inner plan found none).
    rec = CalendarRecurrence(
        CronRecurrence("15 23 * * 1-5", UTC_ZONE),
        pgsched.Calendar(weekdays=[5]),
        on_excluded,
        UTC_ZONE,
    )
    start = datetime(2026, 1, 1, tzinfo=UTC)
    sat = datetime(2026, 1, 3, 23, 15, tzinfo=UTC)
    assert rec.plans_between(start, start + timedelta(days=9)) == [sat]
    assert rec.next_after(start) == sat
    assert rec.latest_at_or_before(sat + timedelta(days=6)) == sat


def test_a_plan_moved_onto_the_working_day_of_the_step_is_found_after_its_wall_time() -> None:
    # Saturday's 09:00 and 17:00 move to Monday; the step after Monday 09:00 is 17:00 (the
    # plan at exactly 09:00 moves onto the step's own instant).
    mon = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    sat = mon - timedelta(days=2)
    plans = [sat, sat.replace(hour=17), mon, mon + timedelta(days=1)]
    inner = HookRecurrence(FixedPlans(*plans))
    rec = CalendarRecurrence(inner, pgsched.Calendar(), "next_working_day", UTC_ZONE)
    assert rec.plans_between(sat - timedelta(days=1), mon + timedelta(days=1)) == [
        mon,
        mon.replace(hour=17),
        mon + timedelta(days=1),
    ]
    assert rec.next_after(mon) == mon.replace(hour=17)
