"""The plans a replica registers with its jobs, from which ``status`` shows the next plan."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import pairwise

import pytest

from pgsched import ConfigError, Scheduler
from pgsched._engine.registration import upcoming_plans
from pgsched._jobs.spec import build_job

pytestmark = pytest.mark.unit

NOW = datetime(2026, 3, 1, 12, 0, 0, 500000, tzinfo=UTC)


def _ok(run: object) -> None:
    return None


def test_a_fast_job_registers_its_plans_of_the_next_30_seconds() -> None:
    plans = upcoming_plans(build_job(_ok, name="fast", every="1s"), NOW)
    assert plans[0] == datetime(2026, 3, 1, 12, 0, 1, tzinfo=UTC)
    assert plans[-1] == datetime(2026, 3, 1, 12, 0, 30, tzinfo=UTC)
    assert len(plans) == 30


def test_a_slow_job_registers_its_next_two_plans() -> None:
    """Once the first is claimed, the second is still on record as the next plan until the
    next registration (status showed none for the seconds in between)."""
    job = build_job(_ok, name="daily", cron="0 3 * * *", timezone="UTC")
    assert upcoming_plans(job, NOW) == [
        datetime(2026, 3, 2, 3, 0, tzinfo=UTC),
        datetime(2026, 3, 3, 3, 0, tzinfo=UTC),
    ]


@pytest.mark.parametrize("every", ["20s", "29s", "1m", "1h"])
def test_a_plan_stays_on_record_past_the_first_until_the_next_registration(every: str) -> None:
    job = build_job(_ok, name="job", every=every)
    step = job.recurrence.nominal_interval(NOW)
    assert step is not None
    for offset in range(0, int(step.total_seconds() * 10)):  # every tenth of a second
        now = NOW + timedelta(seconds=offset / 10)
        plans = upcoming_plans(job, now)
        # the next registration comes 10 s later at most: a plan must still be ahead then
        assert plans[-1] > now + timedelta(seconds=10) and plans[0] > now, (now, plans)
        assert len(plans) >= 2


def test_a_very_fast_job_registers_a_bounded_number_of_plans() -> None:
    plans = upcoming_plans(build_job(_ok, name="burst", every=timedelta(milliseconds=100)), NOW)
    assert len(plans) == 200  # 20 s of the 30 s window: more than the 10 s to the next refresh
    assert NOW < plans[0] <= NOW + timedelta(milliseconds=100)
    assert all(b - a == timedelta(milliseconds=100) for a, b in pairwise(plans))


class _Broken:
    def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
        raise RuntimeError("planner down")


def test_a_failing_planner_or_a_dynamic_job_registers_no_plans() -> None:
    assert upcoming_plans(build_job(_ok, name="hook", planner=_Broken()), NOW) == []
    assert upcoming_plans(build_job(_ok, name="dyn", dynamic=True), NOW) == []


def test_replica_expiry_comes_from_the_argument_the_environment_or_ten_minutes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGSCHED_REPLICA_EXPIRY", raising=False)
    assert Scheduler().replica_expiry == timedelta(minutes=10)
    monkeypatch.setenv("PGSCHED_REPLICA_EXPIRY", "7s")
    assert Scheduler().replica_expiry == timedelta(seconds=7)
    assert Scheduler(replica_expiry="5s").replica_expiry == timedelta(seconds=5)
    monkeypatch.setenv("PGSCHED_REPLICA_EXPIRY", "soon")
    with pytest.raises(ConfigError, match="replica_expiry='soon' is not a duration"):
        Scheduler()
