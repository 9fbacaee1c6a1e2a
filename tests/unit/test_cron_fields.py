"""Cron fields exactly as crontab(5) reads them (README, "Cron expressions"): one table per
rule, each row an expression and its first plans after a fixed instant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import pgsched
from pgsched._jobs.spec import build_job
from pgsched._planning.cron import cron_parts
from pgsched._planning.recurrence import CronRecurrence
from pgsched._planning.schedules import check_schedule
from pgsched._structures import ScheduleSpec

# Thursday 1 January 2026, 00:00 UTC (excluded: plans are strictly after it).
START = datetime(2026, 1, 1, tzinfo=UTC)


def plans(expr: str, count: int = 4, start: datetime = START, zone: str = "UTC") -> list[str]:
    tz = ZoneInfo(zone)
    got = CronRecurrence(expr, tz).upcoming(start, count)
    return [p.astimezone(tz).strftime("%a %m-%d %H:%M") for p in got]


def check(expr: str, expected: list[str]) -> None:
    assert plans(expr, len(expected)) == expected, expr


# -- a-a is a ------------------------------------------------------------------------------

SINGLE_RANGES = [
    ("0 9 * * 1-1", ["Mon 01-05 09:00", "Mon 01-12 09:00", "Mon 01-19 09:00"]),
    ("0 9 * * mon-MON", ["Mon 01-05 09:00", "Mon 01-12 09:00", "Mon 01-19 09:00"]),
    ("0 5-5 * * *", ["Thu 01-01 05:00", "Fri 01-02 05:00", "Sat 01-03 05:00"]),
    ("5-5 * * * *", ["Thu 01-01 00:05", "Thu 01-01 01:05", "Thu 01-01 02:05"]),
    ("0 0 3-3 * *", ["Sat 01-03 00:00", "Tue 02-03 00:00", "Tue 03-03 00:00"]),
    ("0 0 1 feb-Feb *", ["Sun 02-01 00:00", "Mon 02-01 00:00"]),
    ("0 0 * * 7-7", ["Sun 01-04 00:00", "Sun 01-11 00:00"]),
]


@pytest.mark.parametrize(("expr", "expected"), SINGLE_RANGES)
def test_a_range_with_equal_ends_is_that_value(expr: str, expected: list[str]) -> None:
    check(expr, expected)


# -- steps ---------------------------------------------------------------------------------

STEPS = [
    ("*/20 * * * *", ["Thu 01-01 00:20", "Thu 01-01 00:40", "Thu 01-01 01:00"]),
    ("10-40/15 * * * *", ["Thu 01-01 00:10", "Thu 01-01 00:25", "Thu 01-01 00:40"]),
    ("50/5 * * * *", ["Thu 01-01 00:50", "Thu 01-01 00:55", "Thu 01-01 01:50"]),
    ("5-5/2 * * * *", ["Thu 01-01 00:05", "Thu 01-01 01:05"]),  # the range 5-5, stepped
    ("0 22/3 * * *", ["Thu 01-01 22:00", "Fri 01-02 22:00"]),
    ("0 0 * * 5/1", ["Fri 01-02 00:00", "Sat 01-03 00:00", "Sun 01-04 00:00", "Fri 01-09 00:00"]),
    ("0 0 * * 7/1", ["Sun 01-04 00:00", "Sun 01-11 00:00"]),  # 7-7: Sunday, not every day
    ("0 0 * * 2/5", ["Sun 01-04 00:00", "Tue 01-06 00:00", "Sun 01-11 00:00"]),
    ("0 0 * 11/2 1#1", ["Mon 11-02 00:00", "Mon 11-01 00:00"]),
]


@pytest.mark.parametrize(("expr", "expected"), STEPS)
def test_steps(expr: str, expected: list[str]) -> None:
    check(expr, expected)


# -- names and Sunday ----------------------------------------------------------------------

NAMES = [
    ("0 0 1 JAN-mar *", "0 0 1 1-3 *"),
    ("0 0 1 jan,Jul *", "0 0 1 1,7 *"),
    ("0 0 * * SUN", "0 0 * * 0"),
    ("0 0 * * Mon-fri", "0 0 * * 1-5"),
    ("0 0 * * 0", "0 0 * * 7"),
    ("0 0 * * 5-7", "0 0 * * 0,5,6"),
    ("0 0 ? * 1", "0 0 * * 1"),
    ("0 0 1 * ?", "0 0 1 * *"),
]


@pytest.mark.parametrize(("expr", "same_as"), NAMES)
def test_names_in_any_case_0_and_7_sunday_and_question_mark(expr: str, same_as: str) -> None:
    assert plans(expr, 12) == plans(same_as, 12)


@pytest.mark.parametrize(
    ("macro", "same_as"),
    [
        ("@yearly", "0 0 1 1 *"),
        ("@annually", "0 0 1 1 *"),
        ("@monthly", "0 0 1 * *"),
        ("@weekly", "0 0 * * 0"),
        ("@daily", "0 0 * * *"),
        ("@midnight", "0 0 * * *"),
        ("@hourly", "0 * * * *"),
        ("@Daily", "0 0 * * *"),
    ],
)
def test_macros(macro: str, same_as: str) -> None:
    assert plans(macro, 5) == plans(same_as, 5)
    assert cron_parts(macro) == (same_as,)


# -- the day fields ------------------------------------------------------------------------

DAYS = [
    # both restricted: either day matches
    ("0 0 15 * 1", ["Mon 01-05 00:00", "Mon 01-12 00:00", "Thu 01-15 00:00", "Mon 01-19 00:00"]),
    # `*/2` is restricted (as Kubernetes' CronJob reads it; Vixie cron ANDs)
    ("0 0 */10 * 1", ["Mon 01-05 00:00", "Sun 01-11 00:00", "Mon 01-12 00:00", "Mon 01-19 00:00"]),
    ("0 0 1-31 * 1", ["Fri 01-02 00:00", "Sat 01-03 00:00", "Sun 01-04 00:00"]),
    ("0 0 13 * sun-sat", ["Fri 01-02 00:00", "Sat 01-03 00:00", "Sun 01-04 00:00"]),
    # one is `*` or `?`: the other alone decides
    ("0 0 15 * *", ["Thu 01-15 00:00", "Sun 02-15 00:00"]),
    ("0 0 * * 1", ["Mon 01-05 00:00", "Mon 01-12 00:00"]),
    ("0 0 ? * 1", ["Mon 01-05 00:00", "Mon 01-12 00:00"]),
    # L, W and D#n under the same rule
    ("0 0 L * *", ["Sat 01-31 00:00", "Sat 02-28 00:00", "Tue 03-31 00:00"]),
    ("0 0 L * 5", ["Fri 01-02 00:00", "Fri 01-09 00:00", "Fri 01-16 00:00", "Fri 01-23 00:00"]),
    (
        "0 0 L 1 5",
        [
            "Fri 01-02 00:00",
            "Fri 01-09 00:00",
            "Fri 01-16 00:00",
            "Fri 01-23 00:00",
            "Fri 01-30 00:00",
            "Sat 01-31 00:00",
        ],
    ),
    ("0 0 * * 5L", ["Fri 01-30 00:00", "Fri 02-27 00:00", "Fri 03-27 00:00"]),
    ("0 0 15W * *", ["Thu 01-15 00:00", "Mon 02-16 00:00", "Mon 03-16 00:00", "Wed 04-15 00:00"]),
    ("0 0 1W 8 *", ["Mon 08-03 00:00"]),  # Saturday the 1st: Monday, not July 31st
    ("0 0 31W 5 *", ["Fri 05-29 00:00"]),  # Sunday the 31st: Friday, not June 1st
    ("0 0 15W 2 1", ["Mon 02-02 00:00", "Mon 02-09 00:00", "Mon 02-16 00:00", "Mon 02-23 00:00"]),
    ("0 0 14W 2 4", ["Thu 02-05 00:00", "Thu 02-12 00:00", "Fri 02-13 00:00", "Thu 02-19 00:00"]),
    ("0 0 * * 1#1", ["Mon 01-05 00:00", "Mon 02-02 00:00", "Mon 03-02 00:00"]),
    ("0 0 * * mon#1", ["Mon 01-05 00:00", "Mon 02-02 00:00"]),
    ("0 0 * * 7L", ["Sun 01-25 00:00", "Sun 02-22 00:00"]),
    ("0 0 1 * 1#1", ["Mon 01-05 00:00", "Sun 02-01 00:00", "Mon 02-02 00:00", "Sun 03-01 00:00"]),
    ("0 0 8 * 1#1", ["Mon 01-05 00:00", "Thu 01-08 00:00", "Mon 02-02 00:00", "Sun 02-08 00:00"]),
    ("0 0 8 * 1#1,5L", ["Mon 01-05 00:00", "Thu 01-08 00:00", "Fri 01-30 00:00"]),
]


@pytest.mark.parametrize(("expr", "expected"), DAYS)
def test_day_of_month_and_day_of_week(expr: str, expected: list[str]) -> None:
    check(expr, expected)


@pytest.mark.parametrize("expr", ["0 0 1 * 1#1", "0 0 L * 5", "0 0 15W * 1", "0 0 8 * 1#1,5L"])
def test_two_part_expressions_step_back_and_list_as_forward(expr: str) -> None:
    schedule = CronRecurrence(expr, ZoneInfo("Europe/Berlin"))
    assert len(cron_parts(expr)) == 2
    ahead = schedule.upcoming(START, 12)
    assert schedule.plans_between(START, ahead[-1]) == ahead
    for before, after in pairwise(ahead):
        assert schedule.latest_at_or_before(after - timedelta(microseconds=1)) == before
        assert schedule.latest_at_or_before(after) == after
        assert schedule._latest_by_walk(after) == after
        assert schedule._next_by_walk(before) == after


# -- refused, and refused only when it never fires -----------------------------------------


def job(cron: str) -> Any:
    return build_job(lambda run: None, name="nightly", cron=cron)


@pytest.mark.parametrize(
    "expr", ["0 0 8 * 1#1", "0 0 29 2 *", "0 0 * 2 1#5", "0 0 31 * *", "0 0 30 2 1"]
)
def test_an_expression_that_fires_is_accepted(expr: str) -> None:
    job(expr)
    check_schedule("reminder", ScheduleSpec(pgsched.Scope("user", "1"), cron=expr))


@pytest.mark.parametrize(
    ("expr", "says"),
    [
        ("0 0 30 2 *", "never fires"),
        ("0 0 31 4,6,9,11 *", "never fires"),
        ("@reboot", "when your process starts"),
        ("@every_day", "use one of @yearly"),
        ("0 0 * * * *", "drop the seconds (or year) field"),
        ("0 0 0 * * * 2027", "drop the seconds and year fields"),
        ("0 0 LW * *", "use `L`"),
        ("? * * * *", "is not a valid cron expression"),  # `?` only in a day field
        ("0 0 1-1 * 8", "is not a valid cron expression"),
        ("60-60 * * * *", "is not a valid cron expression"),
    ],
)
def test_refused_with_one_line_naming_job_field_value_and_what_to_do(expr: str, says: str) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        job(expr)
    message = str(info.value)
    assert message.startswith(f"job 'nightly': cron={expr!r} "), message
    assert says in message and "\n" not in message
    with pytest.raises(pgsched.ConfigError) as info:
        check_schedule("reminder", ScheduleSpec(pgsched.Scope("user", "1"), cron=expr))
    message = str(info.value)
    assert message.startswith(f"job 'reminder', scope user:1: cron={expr!r} "), message
    assert says in message and "\n" not in message


def test_a_fixed_hour_after_normalising_keeps_the_wall_clock_dst_rule() -> None:
    # `5-5` is the hour 5, a fixed hour: once per local day, not elapsed time.
    assert not CronRecurrence("0 5-5 * * *", ZoneInfo("Europe/Berlin")).follows_elapsed_time
    assert CronRecurrence("0 */2 * * *", ZoneInfo("Europe/Berlin")).follows_elapsed_time
