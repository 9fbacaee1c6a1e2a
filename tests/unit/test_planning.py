"""Cadence plans, the plan cursor, skipped-plan counting and jitter (README, "Job options")."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from pgsched._planning.recurrence import (
    EPOCH,
    CadenceRecurrence,
    CatchUp,
    CronRecurrence,
    DuePlans,
    HookRecurrence,
    PlanCursor,
    Recurrence,
    count_plans_between,
    jitter_offset,
)

US = timedelta(microseconds=1)


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


def minutes(n: float) -> timedelta:
    return timedelta(minutes=n)


# -- cadence ------------------------------------------------------------------------------


def test_cadence_latest_and_next_floor_to_the_cadence() -> None:
    s = CadenceRecurrence(minutes(5))
    t = utc(2027, 1, 1, 12, 7, 30)
    assert s.latest_at_or_before(t) == utc(2027, 1, 1, 12, 5)
    assert s.next_after(t) == utc(2027, 1, 1, 12, 10)


def test_cadence_instant_on_a_plan_is_its_own_latest_and_not_its_next() -> None:
    s = CadenceRecurrence(minutes(5))
    t = utc(2027, 1, 1, 12, 5)
    assert s.latest_at_or_before(t) == t
    assert s.next_after(t) == utc(2027, 1, 1, 12, 10)
    assert s.latest_at_or_before(t - US) == utc(2027, 1, 1, 12, 0)
    assert s.next_after(t - US) == t


@pytest.mark.parametrize(
    "every",
    [
        timedelta(seconds=1),
        timedelta(seconds=7),
        minutes(7),
        timedelta(hours=5),
        timedelta(days=1),
        timedelta(days=3, hours=1),
        timedelta(milliseconds=250),
    ],
)
def test_cadence_plans_are_multiples_of_the_cadence_since_the_unix_epoch(every: timedelta) -> None:
    s = CadenceRecurrence(every)
    t = utc(2027, 6, 15, 13, 47, 12, 345678)
    latest = s.latest_at_or_before(t)
    assert (latest - EPOCH) % every == timedelta(0)
    assert latest <= t < latest + every
    assert s.next_after(t) == latest + every
    assert latest.tzinfo is not None
    assert latest.utcoffset() == timedelta(0)


def test_cadence_alignment_is_to_the_epoch_not_to_local_midnight_or_the_hour() -> None:
    # 2027-01-01T00:00Z is 1798761600 s after the epoch; 1798761600 / 18000 = 99931.2,
    # so the 5-hour grid's latest plan is 99931 * 18000 s = 2026-12-31T23:00Z.
    s = CadenceRecurrence(timedelta(hours=5))
    assert (utc(2027, 1, 1) - EPOCH).total_seconds() == 1798761600
    assert s.latest_at_or_before(utc(2027, 1, 1)) == utc(2026, 12, 31, 23)
    assert s.next_after(utc(2027, 1, 1)) == utc(2027, 1, 1, 4)
    daily = CadenceRecurrence(timedelta(days=1))
    assert daily.latest_at_or_before(utc(2027, 3, 28, 23, 59)) == utc(2027, 3, 28)


def test_cadence_is_independent_of_the_input_time_zone() -> None:
    s = CadenceRecurrence(timedelta(hours=1))
    berlin = datetime(2027, 3, 28, 3, 30, tzinfo=ZoneInfo("Europe/Berlin"))  # 01:30Z
    assert s.latest_at_or_before(berlin) == utc(2027, 3, 28, 1)
    assert s.next_after(berlin) == utc(2027, 3, 28, 2)
    assert s.next_after(berlin).utcoffset() == timedelta(0)


def test_cadence_before_the_epoch() -> None:
    s = CadenceRecurrence(minutes(1))
    t = utc(1969, 12, 31, 23, 59, 30)
    assert s.latest_at_or_before(t) == utc(1969, 12, 31, 23, 59)
    assert s.next_after(t) == EPOCH


def test_cadence_plans_between_is_start_exclusive_end_inclusive() -> None:
    s = CadenceRecurrence(minutes(5))
    start, end = utc(2027, 1, 1, 12, 0), utc(2027, 1, 1, 12, 15)
    assert s.plans_between(start, end) == [
        utc(2027, 1, 1, 12, 5),
        utc(2027, 1, 1, 12, 10),
        utc(2027, 1, 1, 12, 15),
    ]
    assert s.count_between(start, end) == 3
    assert s.plans_between(start, start) == []
    assert s.plans_between(end, start) == []
    assert s.count_between(end, start) == 0
    assert s.plans_between(start, start + minutes(5) - US) == []
    assert s.count_between(start, start + minutes(5) - US) == 0


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (utc(2027, 1, 1, 12, 0), utc(2027, 1, 1, 13, 0)),
        (utc(2027, 1, 1, 12, 0, 1), utc(2027, 1, 1, 13, 0)),
        (utc(2027, 1, 1, 12, 0), utc(2027, 1, 1, 12, 59, 59)),
        (utc(2027, 1, 1, 11, 59, 59), utc(2027, 1, 1, 13, 0, 1)),
        (utc(2027, 1, 1, 12, 3), utc(2027, 1, 1, 12, 4)),
    ],
)
def test_cadence_count_between_matches_plans_between(start: datetime, end: datetime) -> None:
    s = CadenceRecurrence(minutes(5))
    assert s.count_between(start, end) == len(s.plans_between(start, end))


@pytest.mark.parametrize("every", [timedelta(0), timedelta(seconds=-1)])
def test_cadence_refuses_non_positive(every: timedelta) -> None:
    with pytest.raises(ValueError):
        CadenceRecurrence(every)


def test_cadence_upcoming() -> None:
    s = CadenceRecurrence(minutes(15))
    got = s.upcoming(utc(2027, 1, 1, 0, 0), 3)
    assert got == [utc(2027, 1, 1, 0, 15), utc(2027, 1, 1, 0, 30), utc(2027, 1, 1, 0, 45)]
    assert s.upcoming(utc(2027, 1, 1), 0) == []


def test_cadence_describe() -> None:
    assert CadenceRecurrence(minutes(5)).describe() == "every 5m"
    assert CadenceRecurrence(timedelta(days=1)).describe() == "every 1d"
    assert CadenceRecurrence(timedelta(seconds=90)).describe() == "every 1m30s"
    assert CadenceRecurrence(timedelta(hours=1.5)).describe() == "every 1h30m"
    # what cursors store is never reworded: a new wording would compute every cursor again
    assert CadenceRecurrence(timedelta(seconds=90)).key() == "every 90s"
    assert CadenceRecurrence(timedelta(hours=1.5)).key() == "every 90m"


# -- custom planner hook ------------------------------------------------------------------


class _FixedPlanner:
    def __init__(self, plans: Sequence[datetime]) -> None:
        self.plans = plans

    def plans_between(self, start: datetime, end: datetime) -> Sequence[datetime]:
        return list(self.plans)  # deliberately unfiltered, unsorted, with repeats


def test_hook_schedule_normalises_to_sorted_unique_utc_within_the_range() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    hook = _FixedPlanner(
        [
            utc(2027, 1, 1, 12),
            datetime(2027, 1, 1, 12, tzinfo=berlin),  # 11:00Z
            utc(2027, 1, 1, 12),
            utc(2027, 1, 1, 9),
            utc(2027, 1, 1, 15),
        ]
    )
    s = HookRecurrence(hook)
    got = s.plans_between(utc(2027, 1, 1, 9), utc(2027, 1, 1, 12))
    assert got == [utc(2027, 1, 1, 11), utc(2027, 1, 1, 12)]
    assert all(p.utcoffset() == timedelta(0) for p in got)
    assert s.next_after(utc(2027, 1, 1, 12)) == utc(2027, 1, 1, 15)
    assert s.latest_at_or_before(utc(2027, 1, 1, 10)) == utc(2027, 1, 1, 9)


# -- plan cursor --------------------------------------------------------------------------


def cursor(
    schedule: Recurrence | None = None,
    *,
    catch_up: CatchUp = "latest_only",
    delay: timedelta = timedelta(0),
    window: timedelta = timedelta(days=1),
    max_lateness: timedelta | None = None,
    limit: int = 1000,
) -> PlanCursor:
    return PlanCursor(
        schedule or CadenceRecurrence(minutes(5)),
        catch_up=catch_up,
        schedule_delay=delay,
        catch_up_window=window,
        max_lateness=max_lateness,
        limit=limit,
    )


def test_latest_only_gives_the_single_latest_plan() -> None:
    c = cursor()
    assert c.due(utc(2027, 1, 1, 12, 7, 30)) == DuePlans([utc(2027, 1, 1, 12, 5)], [])
    assert c.due(utc(2027, 1, 1, 12, 10)) == DuePlans([utc(2027, 1, 1, 12, 10)], [])


def test_latest_only_respects_schedule_delay() -> None:
    c = cursor(delay=minutes(3))
    # horizon 12:04:30 -> 12:00
    assert c.due(utc(2027, 1, 1, 12, 7, 30)).plans == [utc(2027, 1, 1, 12, 0)]
    # horizon exactly 12:05 -> 12:05
    assert cursor(delay=minutes(3)).due(utc(2027, 1, 1, 12, 8)).plans == [utc(2027, 1, 1, 12, 5)]


def test_every_plan_gives_the_plans_in_the_window_oldest_first() -> None:
    c = cursor(catch_up="every_plan", window=minutes(16))
    due = c.due(utc(2027, 1, 1, 12, 5))
    assert due.plans == [
        utc(2027, 1, 1, 11, 50),
        utc(2027, 1, 1, 11, 55),
        utc(2027, 1, 1, 12, 0),
        utc(2027, 1, 1, 12, 5),
    ]
    assert due.late == []


def test_every_plan_window_is_inclusive_at_its_oldest_end() -> None:
    c = cursor(catch_up="every_plan", window=minutes(15))
    # now - window = 11:50 exactly: a plan exactly catch_up_window old is "no older than" it
    assert c.due(utc(2027, 1, 1, 12, 5)).plans[0] == utc(2027, 1, 1, 11, 50)


def test_every_plan_fresh_and_long_lived_cursors_agree_at_the_window_edge() -> None:
    long_lived = cursor(catch_up="every_plan", window=minutes(15))
    long_lived.due(utc(2027, 1, 1, 12, 0))
    now = utc(2027, 1, 1, 12, 5)
    assert long_lived.due(now) == cursor(catch_up="every_plan", window=minutes(15)).due(now)


def test_every_plan_with_delay_shifts_the_window() -> None:
    c = cursor(catch_up="every_plan", window=minutes(10.5), delay=minutes(2))
    # horizon 12:05, oldest 11:54:30
    assert c.due(utc(2027, 1, 1, 12, 7)).plans == [
        utc(2027, 1, 1, 11, 55),
        utc(2027, 1, 1, 12, 0),
        utc(2027, 1, 1, 12, 5),
    ]


def test_every_plan_is_capped_to_the_newest_limit() -> None:
    c = cursor(catch_up="every_plan", window=timedelta(hours=1), limit=2)
    assert c.due(utc(2027, 1, 1, 12, 7)).plans == [utc(2027, 1, 1, 12, 0), utc(2027, 1, 1, 12, 5)]
    cron = CronRecurrence("*/5 * * * *", ZoneInfo("UTC"))
    c = cursor(cron, catch_up="every_plan", window=timedelta(hours=1), limit=3)
    assert c.due(utc(2027, 1, 1, 12, 7)).plans == [
        utc(2027, 1, 1, 11, 55),
        utc(2027, 1, 1, 12, 0),
        utc(2027, 1, 1, 12, 5),
    ]


def test_max_lateness_boundary_is_exclusive() -> None:
    # lateness = now - (plan + delay); a plan is late only once lateness exceeds max_lateness
    plan = utc(2027, 1, 1, 12, 5)
    on_edge = cursor(delay=minutes(1), max_lateness=minutes(2)).due(utc(2027, 1, 1, 12, 8))
    assert on_edge == DuePlans([plan], [])
    past = cursor(delay=minutes(1), max_lateness=minutes(2)).due(utc(2027, 1, 1, 12, 8) + US)
    assert past == DuePlans([], [plan])


def test_max_lateness_splits_every_plan_candidates() -> None:
    c = cursor(catch_up="every_plan", window=minutes(20), max_lateness=minutes(7))
    due = c.due(utc(2027, 1, 1, 12, 7))
    assert due.late == [utc(2027, 1, 1, 11, 50), utc(2027, 1, 1, 11, 55)]
    assert due.plans == [utc(2027, 1, 1, 12, 0), utc(2027, 1, 1, 12, 5)]


def test_zero_max_lateness_keeps_only_a_plan_exactly_at_the_horizon() -> None:
    c = cursor(max_lateness=timedelta(0))
    assert c.due(utc(2027, 1, 1, 12, 5)).plans == [utc(2027, 1, 1, 12, 5)]
    assert c.due(utc(2027, 1, 1, 12, 5, 1)) == DuePlans([], [utc(2027, 1, 1, 12, 5)])


@pytest.mark.parametrize("catch_up", ["latest_only", "every_plan"])
def test_no_plans_gives_nothing_due(catch_up: CatchUp) -> None:
    never = CronRecurrence("0 0 31 2 *", ZoneInfo("UTC"))
    c = cursor(never, catch_up=catch_up)
    assert c.due(utc(2027, 1, 1)) == DuePlans([], [])
    assert c.due(utc(2027, 1, 2)) == DuePlans([], [])


@pytest.mark.parametrize("catch_up", ["latest_only", "every_plan"])
def test_memoised_cursor_follows_time_and_returns_fresh_lists(catch_up: CatchUp) -> None:
    c = cursor(catch_up=catch_up, window=minutes(10))
    first = c.due(utc(2027, 1, 1, 12, 6))
    first.plans.append(utc(2000, 1, 1))  # a caller mutating its copy must not poison the memo
    again = c.due(utc(2027, 1, 1, 12, 9, 59))
    assert again == cursor(catch_up=catch_up, window=minutes(10)).due(utc(2027, 1, 1, 12, 9, 59))
    assert utc(2000, 1, 1) not in again.plans
    later = c.due(utc(2027, 1, 1, 12, 10))
    assert later.plans[-1] == utc(2027, 1, 1, 12, 10)
    if catch_up == "every_plan":
        assert later.plans == [
            utc(2027, 1, 1, 12, 0),
            utc(2027, 1, 1, 12, 5),
            utc(2027, 1, 1, 12, 10),
        ]
    else:
        assert later.plans == [utc(2027, 1, 1, 12, 10)]


def test_every_plan_cursor_drops_plans_that_leave_the_window() -> None:
    c = cursor(catch_up="every_plan", window=minutes(11))
    assert c.due(utc(2027, 1, 1, 12, 0)).plans == [
        utc(2027, 1, 1, 11, 50),
        utc(2027, 1, 1, 11, 55),
        utc(2027, 1, 1, 12, 0),
    ]
    # no new plan yet (memo path) but the window has slid past 11:50
    assert c.due(utc(2027, 1, 1, 12, 4)).plans == [utc(2027, 1, 1, 11, 55), utc(2027, 1, 1, 12, 0)]
    # a jump far ahead
    assert c.due(utc(2027, 1, 2, 0, 2)).plans == [
        utc(2027, 1, 1, 23, 55),
        utc(2027, 1, 2, 0, 0),
    ]


# -- counting skipped plans ---------------------------------------------------------------


def test_count_plans_between_cadence_is_open_at_both_ends() -> None:
    s = CadenceRecurrence(minutes(5))
    # (12:00, 12:30): 12:05 .. 12:25
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 30), 100) == 5
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 30), 3) == 3
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 5), 100) == 0
    assert count_plans_between(s, utc(2027, 1, 1, 12, 30), utc(2027, 1, 1, 12), 100) == 0
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12), 100) == 0


def test_count_plans_between_cron_is_open_at_both_ends() -> None:
    s = CronRecurrence("*/5 * * * *", ZoneInfo("UTC"))
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 30), 100) == 5
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 32), 100) == 6
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 30), 2) == 2
    assert count_plans_between(s, utc(2027, 1, 1, 12, 30), utc(2027, 1, 1, 12), 100) == 0
    never = CronRecurrence("0 0 31 2 *", ZoneInfo("UTC"))
    assert count_plans_between(never, utc(2027, 1, 1), utc(2030, 1, 1), 100) == 0


def test_count_plans_between_counts_across_a_dst_day() -> None:
    s = CronRecurrence("0 * * * *", ZoneInfo("Europe/Berlin"))
    # local 2027-10-31 00:00 CEST = 2027-10-30T22:00Z; next local midnight = 2027-10-31T23:00Z
    assert count_plans_between(s, utc(2027, 10, 30, 22), utc(2027, 10, 31, 23), 1000) == 24


def test_count_plans_between_cadence_with_an_end_off_the_grid() -> None:
    s = CadenceRecurrence(minutes(5))
    # (12:00, 12:32): 12:05, 12:10, 12:15, 12:20, 12:25, 12:30
    assert count_plans_between(s, utc(2027, 1, 1, 12), utc(2027, 1, 1, 12, 32), 100) == 6


# -- jitter -------------------------------------------------------------------------------


def test_jitter_zero_gives_zero() -> None:
    assert jitter_offset("job", "tenant", "1", utc(2027, 1, 1), timedelta(0)) == timedelta(0)


def test_jitter_is_deterministic_and_in_range() -> None:
    plan = utc(2027, 1, 1, 9)
    jitter = minutes(10)
    a = jitter_offset("report", "tenant", "42", plan, jitter)
    assert a == jitter_offset("report", "tenant", "42", plan, jitter)
    assert timedelta(0) <= a < jitter
    # the same instant written in another zone is the same plan
    berlin = plan.astimezone(ZoneInfo("Europe/Berlin"))
    assert jitter_offset("report", "tenant", "42", berlin, jitter) == a


def test_jitter_of_one_microsecond_is_zero() -> None:
    assert jitter_offset("j", "k", "i", utc(2027, 1, 1), US) == timedelta(0)


def test_jitter_spreads_over_scopes() -> None:
    plan = utc(2027, 1, 1, 9)
    jitter = timedelta(seconds=100)
    offsets = [jitter_offset("fanout", "tenant", str(i), plan, jitter) for i in range(1000)]
    assert all(timedelta(0) <= o < jitter for o in offsets)
    assert len(set(offsets)) > 990
    buckets = [0] * 10
    for o in offsets:
        buckets[int(o.total_seconds() // 10)] += 1
    # ~100 per bucket expected; a hash that clumps fails this
    assert min(buckets) >= 60, buckets
    assert max(buckets) <= 140, buckets
    mean = sum(o.total_seconds() for o in offsets) / len(offsets)
    assert 45 <= mean <= 55


def test_jitter_depends_on_job_kind_id_and_plan() -> None:
    plan = utc(2027, 1, 1, 9)
    jitter = timedelta(hours=1)
    base = jitter_offset("job", "tenant", "1", plan, jitter)
    variants = [
        jitter_offset("job2", "tenant", "1", plan, jitter),
        jitter_offset("job", "region", "1", plan, jitter),
        jitter_offset("job", "tenant", "2", plan, jitter),
        jitter_offset("job", "tenant", "1", plan + minutes(5), jitter),
    ]
    assert all(v != base for v in variants)
