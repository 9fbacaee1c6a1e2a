"""Durations as users write them (README, "Job options")."""

from __future__ import annotations

from datetime import timedelta

import pytest

import pgsched
from pgsched._times import parse_duration


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(minutes=3), timedelta(minutes=3)),
        (timedelta(0), timedelta(0)),
        (0, timedelta(0)),
        (90, timedelta(seconds=90)),
        (2.5, timedelta(seconds=2.5)),
        (0.001, timedelta(milliseconds=1)),
        ("90s", timedelta(seconds=90)),
        ("5m", timedelta(minutes=5)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d", timedelta(days=1)),
        (" 5m ", timedelta(minutes=5)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("2w", timedelta(weeks=2)),
        ("5 minutes", timedelta(minutes=5)),
        ("0s", timedelta(0)),
        ("36500d", timedelta(days=36500)),
        (timedelta(days=36500), timedelta(days=36500)),
    ],
)
def test_valid_durations(value, expected) -> None:
    got = parse_duration(value, field="every")
    assert got == expected
    assert isinstance(got, timedelta)


@pytest.mark.parametrize(
    "value",
    [
        -1,
        -0.5,
        timedelta(seconds=-1),
        "-5m",
        float("nan"),
        float("inf"),
        float("-inf"),
        1e12,
        10**30,
        "36501d",
        timedelta(days=36501),
        True,
        False,
        None,
        "",
        "   ",
        "5x",
        "soon",
        "nan",
        "inf",
        "1e12s",
        "10 years",
        b"5m",
        [5],
        object(),
    ],
    ids=lambda v: "object" if type(v) is object else repr(v),
)
def test_invalid_durations_raise_config_error_naming_job_field_and_value(value) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        parse_duration(value, field="catch_up_window", job="nightly")
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "'nightly'" in message
    assert "catch_up_window=" in message
    assert repr(value)[:20] in message


def test_without_a_job_the_message_still_names_the_field() -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        parse_duration("5x", field="tick_interval")
    assert str(info.value).startswith("tick_interval='5x'")


@pytest.mark.parametrize("value", [0, 0.0, "0s", "0m", timedelta(0), 1e-9])
def test_zero_refused_when_not_allowed(value) -> None:
    assert parse_duration(value, field="jitter") == timedelta(0)
    with pytest.raises(pgsched.ConfigError, match=r"run_timeout=.*greater than zero"):
        parse_duration(value, field="run_timeout", job="j", allow_zero=False)


def test_smallest_positive_duration_is_allowed_when_zero_is_not() -> None:
    assert parse_duration(timedelta(microseconds=1), field="every", allow_zero=False) == timedelta(
        microseconds=1
    )
