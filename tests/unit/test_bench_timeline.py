"""The benchmark's catch-up storm measures the same backlog wherever in the minute it starts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bench.timeline import SETTLE_CAP_S, CatchUpStorm, Idle
from bench.workloads import WORKLOADS


class ClockStage:
    """A stage on a simulated clock: sleeping moves it, the replicas take 25 s to run a
    backlog, and every plan due by then counts as run."""

    def __init__(self, now: datetime) -> None:
        self.clock = now
        self.spawned: datetime | None = None
        self.prepopulated: datetime | None = None

    def now(self) -> datetime:
        return self.clock

    def sleep_until(self, t: datetime) -> None:
        self.clock = max(self.clock, t)

    def prepopulate(self, plan: datetime) -> None:
        self.prepopulated = plan

    def start_replicas(self) -> datetime:
        self.spawned = self.clock
        return self.clock

    def begin_measurement(self, from_zero: bool = False) -> None:
        assert from_zero

    def alive(self) -> bool:
        return True

    def completed(self, plans: list[datetime]) -> int:
        self.clock += timedelta(seconds=25)
        return len(plans) * WORKLOADS["e"].scopes

    def settled(self) -> bool:
        return True


class SettlingStage(ClockStage):
    """Replicas whose first sight of the scopes takes ``settle_s`` (``None``: forever)."""

    def __init__(self, now: datetime, settle_s: float | None) -> None:
        super().__init__(now)
        self.settle_s = settle_s
        self.measured_from: datetime | None = None

    def begin_measurement(self, from_zero: bool = False) -> None:
        self.measured_from = self.clock

    def settled(self) -> bool:
        assert self.spawned is not None
        return self.settle_s is not None and self.clock >= self.spawned + timedelta(
            seconds=self.settle_s
        )


def test_an_idle_window_starts_once_the_replicas_have_settled() -> None:
    start = datetime(2026, 11, 28, 1, 30, tzinfo=UTC)
    stage = SettlingStage(start, settle_s=31.0)
    window = Idle(WORKLOADS["f"], timedelta(seconds=9)).run(stage, start)
    assert stage.measured_from == window.start == start + timedelta(seconds=31)
    assert window.settled_s == 31.0
    assert stage.clock == window.start + timedelta(seconds=WORKLOADS["f"].window_s)


def test_an_idle_window_that_never_settles_says_so() -> None:
    start = datetime(2026, 11, 28, 1, 30, tzinfo=UTC)
    stage = SettlingStage(start, settle_s=None)
    window = Idle(WORKLOADS["f"], timedelta(seconds=9)).run(stage, start)
    assert window.settled_s is None
    assert window.start >= start + timedelta(seconds=9 + SETTLE_CAP_S)


@pytest.mark.parametrize("second", [0.2, 20.0, 45.0, 59.9])
def test_the_storm_holds_the_same_backlog_wherever_in_the_minute_it_starts(second: float) -> None:
    start = datetime(2026, 11, 28, 1, 30, tzinfo=UTC) + timedelta(seconds=second)
    stage = ClockStage(start)
    window = CatchUpStorm(WORKLOADS["e"]).run(stage, start)
    assert stage.spawned is not None and stage.prepopulated is not None
    back = datetime(2026, 11, 28, 1, 31, tzinfo=UTC)
    # the replicas come back just after a plan fell due, with a whole period before the next
    assert back < stage.spawned < back + timedelta(seconds=1)
    assert stage.prepopulated == back - timedelta(minutes=10)
    # the ten plans missed while they were down, the one due as they came back the last;
    # the plan that falls due while the storm runs (25 s later) is not measured
    assert window.plans == [back - timedelta(minutes=9 - k) for k in range(10)]
    assert window.origin == stage.spawned
