"""A backfill of more than 100,000 runs is refused before anything is written, with the
count (finding: 6 years of a 10-s job, about 19 M plans, failed after 2 minutes on the
statement timeout)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import count

START = datetime(2020, 1, 1, tzinfo=UTC)
SIX_YEARS = START.replace(year=2026)


def _scheduler(make_scheduler: SchedulerFactory) -> pgsched.Scheduler:
    s = make_scheduler()

    @s.job(every="10s")
    def tick(run: pgsched.Run) -> int:
        return 1

    @s.job(cron="* 9-17 * * 1-5", scopes=[pgsched.Scope("site", str(i)) for i in range(3)])
    def office(run: pgsched.Run) -> int:
        return 1

    return s


def test_six_years_of_a_10s_job_is_refused_with_its_count(
    migrated: str, make_scheduler: SchedulerFactory, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    s = _scheduler(make_scheduler)
    plans = int((SIX_YEARS - START) / timedelta(seconds=10)) + 1  # both ends are plans
    with pytest.raises(pgsched.ConfigError) as refused:
        s.backfill("tick", START, SIX_YEARS)
    message = str(refused.value)
    assert f"backfill of {plans:,} runs ({plans:,} plans x 1 scope) refused" in message
    assert "job 'tick'" in message and "at most 100,000" in message and "\n" not in message
    assert count(db, migrated) == 0  # nothing inserted


def test_a_cron_backfill_over_the_bound_across_scopes_is_refused(
    migrated: str, make_scheduler: SchedulerFactory, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    s = _scheduler(make_scheduler)
    with pytest.raises(pgsched.ConfigError) as refused:
        s.backfill("office", START, SIX_YEARS)  # about 168,000 plans x 3 scopes
    assert "backfill of more than 100,000 runs (over 33,333 plans x 3 scopes)" in str(refused.value)
    assert count(db, migrated) == 0
    week = START + timedelta(days=7)  # 5 days x 9 hours x 60 minutes, each in 3 scopes
    assert s.backfill("office", START, week) == 5 * 9 * 60 * 3


def test_a_backfill_of_exactly_the_bound_is_accepted(
    migrated: str, make_scheduler: SchedulerFactory, db: psycopg.Connection[tuple[object, ...]]
) -> None:
    s = _scheduler(make_scheduler)
    end = START + timedelta(seconds=10) * 99_999  # 100,000 plans
    assert s.backfill("tick", START, end) == 100_000
    with pytest.raises(pgsched.ConfigError, match="100,001 runs"):
        s.backfill("tick", START, end + timedelta(seconds=10))
    assert count(db, migrated) == 100_000
