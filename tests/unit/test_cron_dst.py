"""Cron plans in IANA zones across DST changes (the DST rules of the README's job options)."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter

from pgsched._planning.recurrence import CronRecurrence

DAY = timedelta(days=1)


def utc(
    year: int,
    month: int,
    day: int,
    hour: int = 0,
    minute: int = 0,
    second: int = 0,
    microsecond: int = 0,
) -> datetime:
    return datetime(year, month, day, hour, minute, second, microsecond, tzinfo=UTC)


def local_midnight(tz: ZoneInfo, d: date) -> datetime:
    """The first instant of local day ``d`` (a midnight inside a gap maps to the gap's end)."""
    return datetime.combine(d, time(0), tzinfo=tz).astimezone(UTC)


def day_length(tz: ZoneInfo, d: date) -> timedelta:
    return local_midnight(tz, d + DAY) - local_midnight(tz, d)


def fires_on(schedule: CronRecurrence, d: date) -> list[datetime]:
    """The plans whose local date in the schedule's zone is ``d``."""
    tz = schedule.tz
    lo, hi = local_midnight(tz, d), local_midnight(tz, d + DAY)
    plans = schedule.plans_between(lo - DAY, hi + DAY)
    return [p for p in plans if p.astimezone(tz).date() == d]


def dst_days(zone: str, years: range) -> list[tuple[date, str]]:
    """Local days whose length is not 24 h, as (day, "spring" | "fall")."""
    tz = ZoneInfo(zone)
    out = []
    d = date(years.start, 1, 1)
    while d.year < years.stop:
        length = day_length(tz, d)
        if length != DAY:
            out.append((d, "spring" if length < DAY else "fall"))
        d += DAY
    return out


DST_ZONES = ["Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "America/Santiago"]

# Expected fires per local day, from the README's DST rules:
# - "30 2 * * *": fixed hour -> once every local day, skipped or repeated.
# - "0 * * * *": elapsed time -> every instant whose local time is hh:00. A 1-hour shift gives
#   23 / 25. Lord Howe shifts 30 min at 02:00: spring 02:00 -> 02:30 loses the 02:00 mark (23);
#   fall 02:00 -> 01:30 repeats 01:30-01:59, which holds no full hour (24).
# - "*/15 1-3 * * *": fixed hour (a range is not a step) -> 12 wall times, each at most once;
#   wall times in the gap all fire at the gap's end, which coincides with an existing wall time
#   (Berlin/New York: 02:00-02:45 -> 03:00 => 8; Lord Howe: 02:00, 02:15 -> 02:30 => 10).
#   Santiago changes at midnight, so hours 1-3 are untouched (12).
EXPECTED = {
    "30 2 * * *": {z: {"spring": 1, "fall": 1, "normal": 1} for z in DST_ZONES},
    "0 * * * *": {
        "Europe/Berlin": {"spring": 23, "fall": 25, "normal": 24},
        "America/New_York": {"spring": 23, "fall": 25, "normal": 24},
        "Australia/Lord_Howe": {"spring": 23, "fall": 24, "normal": 24},
        "America/Santiago": {"spring": 23, "fall": 25, "normal": 24},
    },
    "*/15 1-3 * * *": {
        "Europe/Berlin": {"spring": 8, "fall": 12, "normal": 12},
        "America/New_York": {"spring": 8, "fall": 12, "normal": 12},
        "Australia/Lord_Howe": {"spring": 10, "fall": 12, "normal": 12},
        "America/Santiago": {"spring": 12, "fall": 12, "normal": 12},
    },
}


@pytest.mark.parametrize("zone", DST_ZONES)
def test_helper_finds_two_dst_days_a_year(zone: str) -> None:
    days = dst_days(zone, range(2026, 2029))
    assert [kind for _, kind in days].count("spring") == 3
    assert [kind for _, kind in days].count("fall") == 3


@pytest.mark.parametrize("expr", sorted(EXPECTED))
@pytest.mark.parametrize("zone", DST_ZONES)
def test_fires_per_local_day_on_dst_days_2026_2028(zone: str, expr: str) -> None:
    schedule = CronRecurrence(expr, ZoneInfo(zone))
    for d, kind in dst_days(zone, range(2026, 2029)):
        for day, k in ((d, kind), (d - 7 * DAY, "normal")):
            plans = fires_on(schedule, day)
            assert len(plans) == EXPECTED[expr][zone][k], (zone, expr, day, k, plans)
            assert plans == sorted(set(plans))
            assert all(p.utcoffset() == timedelta(0) for p in plans)


# -- one example of each DST rule -----------------------------------------------------------


def test_skipped_wall_time_fires_at_the_end_of_the_gap_berlin() -> None:
    s = CronRecurrence("30 2 * * *", ZoneInfo("Europe/Berlin"))
    assert fires_on(s, date(2027, 3, 28)) == [utc(2027, 3, 28, 1, 0)]  # 03:00 CEST
    assert s.next_after(utc(2027, 3, 27, 12)) == utc(2027, 3, 28, 1, 0)
    assert s.latest_at_or_before(utc(2027, 3, 28, 1, 0)) == utc(2027, 3, 28, 1, 0)
    assert s.latest_at_or_before(utc(2027, 3, 28, 0, 59, 59)) == utc(2027, 3, 27, 1, 30)


def test_repeated_wall_time_fires_once_at_its_first_occurrence_new_york() -> None:
    s = CronRecurrence("30 1 * * *", ZoneInfo("America/New_York"))
    assert fires_on(s, date(2027, 11, 7)) == [utc(2027, 11, 7, 5, 30)]  # 01:30 EDT
    assert s.next_after(utc(2027, 11, 7, 5, 30)) == utc(2027, 11, 8, 6, 30)
    # the premise: croniter alone fires twice that day
    tz = ZoneInfo("America/New_York")
    it = croniter("30 1 * * *", datetime(2027, 11, 7, 0, 0, tzinfo=tz))
    raw = [it.get_next(datetime).astimezone(UTC) for _ in range(2)]
    assert raw == [utc(2027, 11, 7, 5, 30), utc(2027, 11, 7, 6, 30)]


@pytest.mark.parametrize(
    ("d", "count"), [(date(2027, 10, 31), 25), (date(2027, 3, 28), 23), (date(2027, 6, 1), 24)]
)
def test_hourly_follows_elapsed_time_in_berlin(d: date, count: int) -> None:
    for expr in ("0 * * * *", "@hourly"):
        plans = fires_on(CronRecurrence(expr, ZoneInfo("Europe/Berlin")), d)
        assert len(plans) == count
        gaps = {b - a for a, b in pairwise(plans)}
        assert gaps == {timedelta(hours=1)}


def test_fall_back_hourly_fires_both_occurrences_of_the_repeated_hour() -> None:
    plans = fires_on(CronRecurrence("0 * * * *", ZoneInfo("Europe/Berlin")), date(2027, 10, 31))
    assert utc(2027, 10, 31, 0, 0) in plans  # 02:00 CEST
    assert utc(2027, 10, 31, 1, 0) in plans  # 02:00 CET


def test_spring_forward_hourly_has_no_plan_in_the_gap() -> None:
    plans = fires_on(CronRecurrence("0 * * * *", ZoneInfo("Europe/Berlin")), date(2027, 3, 28))
    assert utc(2027, 3, 28, 0, 0) in plans  # 01:00 CET
    assert utc(2027, 3, 28, 1, 0) in plans  # 03:00 CEST
    assert [p for p in plans if utc(2027, 3, 28, 0) < p < utc(2027, 3, 28, 1)] == []


def test_two_hour_step_is_elapsed_time() -> None:
    s = CronRecurrence("0 */2 * * *", ZoneInfo("Europe/Berlin"))
    assert len(fires_on(s, date(2027, 10, 31))) == 13  # 02:00 happens twice
    assert len(fires_on(s, date(2027, 3, 28))) == 11  # 02:00 never happens
    ny = CronRecurrence("0 */2 * * *", ZoneInfo("America/New_York"))
    assert len(fires_on(ny, date(2027, 11, 7))) == 12  # 01:00-01:59 repeats; 02:00 once


def test_hour_range_is_a_fixed_hour_expression() -> None:
    s = CronRecurrence("0 0-23 * * *", ZoneInfo("Europe/Berlin"))
    assert len(fires_on(s, date(2027, 10, 31))) == 24  # repeated 02:00 fires once
    assert len(fires_on(s, date(2027, 3, 28))) == 23  # 02:00 shifts onto 03:00


# -- overrides ------------------------------------------------------------------------------


def test_dst_repeated_last_and_both() -> None:
    ny = ZoneInfo("America/New_York")
    d = date(2027, 11, 7)
    assert fires_on(CronRecurrence("30 1 * * *", ny, dst_repeated="first"), d) == [
        utc(2027, 11, 7, 5, 30)
    ]
    assert fires_on(CronRecurrence("30 1 * * *", ny, dst_repeated="last"), d) == [
        utc(2027, 11, 7, 6, 30)
    ]
    assert fires_on(CronRecurrence("30 1 * * *", ny, dst_repeated="both"), d) == [
        utc(2027, 11, 7, 5, 30),
        utc(2027, 11, 7, 6, 30),
    ]


def test_dst_skipped_skip_drops_the_day() -> None:
    s = CronRecurrence("30 2 * * *", ZoneInfo("Europe/Berlin"), dst_skipped="skip")
    assert fires_on(s, date(2027, 3, 28)) == []
    assert s.next_after(utc(2027, 3, 27, 12)) == utc(2027, 3, 29, 0, 30)
    assert s.latest_at_or_before(utc(2027, 3, 28, 23)) == utc(2027, 3, 27, 1, 30)


def test_overrides_apply_to_elapsed_time_expressions_too() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    first = CronRecurrence("0 * * * *", berlin, dst_repeated="first")
    assert len(fires_on(first, date(2027, 10, 31))) == 24
    assert utc(2027, 10, 31, 1, 0) not in fires_on(first, date(2027, 10, 31))
    last = CronRecurrence("0 * * * *", berlin, dst_repeated="last")
    assert utc(2027, 10, 31, 0, 0) not in fires_on(last, date(2027, 10, 31))
    assert utc(2027, 10, 31, 1, 0) in fires_on(last, date(2027, 10, 31))
    # shift moves 02:30 (missing) to 03:00 CEST, a new instant for a half-past schedule
    shift = CronRecurrence("30 * * * *", berlin, dst_skipped="shift")
    plans = fires_on(shift, date(2027, 3, 28))
    assert len(plans) == 24
    assert utc(2027, 3, 28, 1, 0) in plans
    assert len(fires_on(CronRecurrence("30 * * * *", berlin), date(2027, 3, 28))) == 23


def test_fixed_hour_with_both_fires_twice_on_fall_back() -> None:
    s = CronRecurrence("*/15 1-3 * * *", ZoneInfo("Europe/Berlin"), dst_repeated="both")
    assert len(fires_on(s, date(2027, 10, 31))) == 16
    s = CronRecurrence("*/15 1-3 * * *", ZoneInfo("Europe/Berlin"), dst_skipped="skip")
    assert len(fires_on(s, date(2027, 3, 28))) == 8  # 4 skipped, 03:00 still fires once


# -- 30-minute and midnight transitions ------------------------------------------------------


def test_lord_howe_half_hour_shift() -> None:
    lh = ZoneInfo("Australia/Lord_Howe")
    # spring 2026-10-04: 02:00 LHST (+10:30) -> 02:30 LHDT (+11) at 15:30Z
    assert fires_on(CronRecurrence("15 2 * * *", lh), date(2026, 10, 4)) == [
        utc(2026, 10, 3, 15, 30)
    ]
    assert fires_on(CronRecurrence("15 2 * * *", lh, dst_skipped="skip"), date(2026, 10, 4)) == []
    # fall 2026-04-05: 02:00 LHDT (+11) -> 01:30 LHST (+10:30) at 15:00Z
    assert fires_on(CronRecurrence("45 1 * * *", lh), date(2026, 4, 5)) == [utc(2026, 4, 4, 14, 45)]
    assert fires_on(CronRecurrence("45 1 * * *", lh, dst_repeated="last"), date(2026, 4, 5)) == [
        utc(2026, 4, 4, 15, 15)
    ]
    assert len(fires_on(CronRecurrence("30 * * * *", lh), date(2026, 4, 5))) == 25


def test_santiago_midnight_transitions() -> None:
    scl = ZoneInfo("America/Santiago")
    # 2026-09-06 00:00 -04 does not exist; the day starts at 01:00 -03 = 04:00Z
    assert fires_on(CronRecurrence("0 0 * * *", scl), date(2026, 9, 6)) == [utc(2026, 9, 6, 4)]
    # 2026-04-04 24:00 -03 -> 23:00 -04: 23:30 happens twice on the 4th
    assert fires_on(CronRecurrence("30 23 * * *", scl), date(2026, 4, 4)) == [
        utc(2026, 4, 5, 2, 30)
    ]
    assert fires_on(CronRecurrence("30 23 * * *", scl, dst_repeated="last"), date(2026, 4, 4)) == [
        utc(2026, 4, 5, 3, 30)
    ]


def test_sao_paulo_historical_midnight_dst_and_none_now() -> None:
    sp = ZoneInfo("America/Sao_Paulo")
    # 2018-11-04 00:00 -03 -> 01:00 -02: midnight fires at 01:00 -02 = 03:00Z
    assert fires_on(CronRecurrence("0 0 * * *", sp), date(2018, 11, 4)) == [utc(2018, 11, 4, 3)]
    assert len(fires_on(CronRecurrence("0 * * * *", sp), date(2018, 11, 4))) == 23
    assert len(fires_on(CronRecurrence("0 * * * *", sp), date(2019, 2, 16))) == 25
    # Brazil has had no DST since 2019
    assert dst_days("America/Sao_Paulo", range(2026, 2029)) == []


@pytest.mark.parametrize(
    ("zone", "offset"),
    [
        ("UTC", timedelta(0)),
        ("Asia/Kolkata", timedelta(hours=5, minutes=30)),
        ("America/Sao_Paulo", timedelta(hours=-3)),
        ("America/Asuncion", timedelta(hours=-3)),
    ],
)
def test_zones_without_dst_fire_every_day_at_the_same_utc_time(
    zone: str, offset: timedelta
) -> None:
    tz = ZoneInfo(zone)
    s = CronRecurrence("30 2 * * *", tz)
    plans = s.plans_between(utc(2027, 1, 1), utc(2028, 1, 1))
    assert len(plans) == 365
    assert {(p + offset).time() for p in plans} == {time(2, 30)}
    assert {p - plans[0] for p in plans} == {DAY * i for i in range(365)}
    hourly = CronRecurrence("0 * * * *", tz).plans_between(utc(2027, 3, 1), utc(2027, 4, 1))
    assert len(hourly) == 31 * 24


# -- elapsed-time oracle: every UTC minute whose local time matches ---------------------------


@pytest.mark.parametrize(
    ("expr", "zone", "start"),
    [
        ("*/7 * * * *", "Europe/Berlin", utc(2027, 10, 30, 20)),
        ("*/7 * * * *", "Europe/Berlin", utc(2027, 3, 27, 20)),
        ("30 * * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 10)),
        ("0 */2 * * *", "Australia/Lord_Howe", utc(2026, 10, 3, 10)),
        ("*/20 */3 * * *", "America/Santiago", utc(2026, 4, 4, 20)),
        ("0 * * * *", "America/New_York", utc(2027, 11, 7, 0)),
    ],
)
def test_elapsed_time_expressions_match_a_minute_by_minute_scan(
    expr: str, zone: str, start: datetime
) -> None:
    tz = ZoneInfo(zone)
    end = start + timedelta(hours=12)
    expected = []
    u = start + timedelta(minutes=1)
    while u <= end:
        if croniter.match(expr, u.astimezone(tz).replace(tzinfo=None)):
            expected.append(u)
        u += timedelta(minutes=1)
    assert CronRecurrence(expr, tz).plans_between(start, end) == expected


# -- never-firing and upcoming ---------------------------------------------------------------


def test_never_firing_expression() -> None:
    s = CronRecurrence("0 0 31 2 *", ZoneInfo("Europe/Berlin"))
    assert s.next_after(utc(2027, 1, 1)) is None
    assert s.latest_at_or_before(utc(2027, 1, 1)) is None
    assert s.upcoming(utc(2027, 1, 1), 3) == []
    assert s.plans_between(utc(2020, 1, 1), utc(2030, 1, 1)) == []


def test_leap_day_only_expression_finds_the_next_leap_year() -> None:
    s = CronRecurrence("0 12 29 2 *", ZoneInfo("UTC"))
    assert s.next_after(utc(2028, 3, 1)) == utc(2032, 2, 29, 12)
    assert s.latest_at_or_before(utc(2032, 2, 28)) == utc(2028, 2, 29, 12)


@pytest.mark.parametrize(
    ("expr", "zone"),
    [
        ("0 * * * *", "Europe/Berlin"),
        ("30 2 * * *", "America/New_York"),
        ("*/15 1-3 * * *", "Australia/Lord_Howe"),
        ("30 23 * * *", "America/Santiago"),
    ],
)
def test_upcoming_is_strictly_increasing_aware_utc(expr: str, zone: str) -> None:
    s = CronRecurrence(expr, ZoneInfo(zone))
    after = utc(2027, 3, 26)
    got = s.upcoming(after, 60)
    assert len(got) == 60
    assert got[0] > after
    assert all(a < b for a, b in pairwise(got))
    assert all(p.tzinfo is not None and p.utcoffset() == timedelta(0) for p in got)
    assert got == s.plans_between(after, got[-1])


def test_cron_describe_and_bad_field_counts() -> None:
    s = CronRecurrence("0 9 * * 1-5", ZoneInfo("Europe/Berlin"))
    assert "0 9 * * 1-5" in s.describe()
    assert "Europe/Berlin" in s.describe()
    with pytest.raises(ValueError, match="6 fields"):
        CronRecurrence("0 0 * * * *", ZoneInfo("UTC"))


# The one-step paths (next plan and latest plan in one croniter step when no offset change is
# near) must agree with the DST-margin walk everywhere they answer: instants near transitions
# in zones with odd rules, expressions whose next plan is days or years away.
_STEP_ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Africa/Casablanca",
    "America/Santiago",
    "Pacific/Apia",
    "America/Sitka",
    "Asia/Kolkata",
    "UTC",
)
_STEP_EXPRS = (
    "* * * * *",
    "*/15 * * * *",
    "0 * * * *",
    "30 2 * * *",
    "0 1,2,3 * * *",
    "15 9 * * 1-5",
    "0 9 13 * *",
    "45 23 * * 0",
    "0 0 1 1 *",
    "0 9 29 2 *",
    "*/20 2 * * *",
    "30 2 1 * 0#1",  # two croniter parts (day of month, weekday): the earlier plan wins
    "0 1 L * 5L",
)


def _transition_instants(zone: ZoneInfo) -> list[datetime]:
    """UTC instants of the zone's offset changes from 1990 to 2035 (to the minute)."""
    found, t = [], datetime(1990, 1, 1, tzinfo=UTC)
    offset = t.astimezone(zone).utcoffset()
    while t < datetime(2035, 1, 1, tzinfo=UTC):
        t += timedelta(hours=6)
        now = t.astimezone(zone).utcoffset()
        if now != offset:
            lo, hi = t - timedelta(hours=6), t  # bisect to the minute
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                lo, hi = (mid, hi) if mid.astimezone(zone).utcoffset() == offset else (lo, mid)
            found.append(hi)
            offset = now
    return found


@pytest.mark.parametrize("zone", _STEP_ZONES)
def test_one_step_paths_agree_with_the_dst_walk(zone: str) -> None:
    import random

    rng = random.Random(zone)
    tz = ZoneInfo(zone)
    transitions = _transition_instants(tz)
    answered = 0
    schedules = [CronRecurrence(expr, tz) for expr in _STEP_EXPRS]
    schedules += [CronRecurrence(e, tz, "last", "skip") for e in ("30 1 * * 0", "30 1/2 * * *")]
    for schedule in schedules:
        expr = schedule.expr
        for _ in range(60):
            near = rng.random()
            if transitions and near < 0.5:  # within hours of a change
                base = rng.choice(transitions) + timedelta(minutes=rng.randrange(-240, 240))
            elif transitions and near < 0.8:  # days before or after one
                base = rng.choice(transitions) + timedelta(minutes=rng.randrange(-4 * 1440, 1440))
            else:
                minutes = rng.randrange(2 * 10**7)
                base = datetime(1995, 1, 1, tzinfo=UTC) + timedelta(minutes=minutes)
            t = base + timedelta(seconds=rng.choice((0, 0, 1, 59)))
            quick = schedule._one_step(t, backwards=False)
            if quick is not None:
                answered += 1
                assert quick == schedule._next_by_walk(t), (expr, zone, t)
            quick = schedule._one_step(t, backwards=True)
            if quick is not None:
                answered += 1
                assert quick == schedule._latest_by_walk(t), (expr, zone, t)
    assert answered > len(_STEP_EXPRS) * 60 // 4  # the one-step paths do answer


@pytest.mark.parametrize(
    ("expr", "surely"),
    [
        ("0 9 * * *", True),
        ("0 9 * * 1-5", True),
        ("0 9 28 * *", True),
        ("0 9 L 2 *", True),
        ("0 9 30 2 1", True),  # croniter ORs a day of month with a weekday
        ("0 9 30 2 *", False),  # never fires
        ("0 9 31 4,6 *", False),  # never fires
        ("0 9 29 2 *", False),  # fires in leap years: found by the walk
        ("0 9 * * 1#2", False),
        ("0 9 8 * 1#1", True),  # the 8th, or the first Monday: the 8th is in every month
        ("0 9 31 2 1#5", False),  # never the 31st: Februaries with five Mondays, by the walk
    ],
)
def test_surely_fires_is_only_said_of_expressions_that_fire(expr: str, surely: bool) -> None:
    schedule = CronRecurrence(expr, ZoneInfo("Europe/Berlin"))
    assert schedule.surely_fires() is surely
    fires = schedule.next_after(datetime(2000, 1, 1, tzinfo=UTC)) is not None
    assert fires or not surely
    assert fires is (expr not in ("0 9 30 2 *", "0 9 31 4,6 *"))
