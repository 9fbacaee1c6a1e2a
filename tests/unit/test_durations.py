"""Durations in human output are written as durations are written in input: ``20s``,
``1h30m``, read back by ``parse_duration`` to the same value."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pgsched._times import format_duration, parse_duration


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(seconds=20), "20s"),
        (timedelta(minutes=15), "15m"),
        (timedelta(hours=1, minutes=30), "1h30m"),
        (timedelta(days=2), "2d"),
        (timedelta(days=1, hours=1, minutes=1, seconds=1.5), "1d1h1m1.5s"),
        (timedelta(seconds=0.1), "0.1s"),
        (timedelta(0), "0s"),
    ],
)
def test_a_duration_is_written_as_input_writes_it(value: timedelta, text: str) -> None:
    assert format_duration(value) == text
    assert parse_duration(text, field="every") == value
