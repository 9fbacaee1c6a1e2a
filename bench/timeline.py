"""When the replicas start and which window is measured, for each kind of workload.

A timeline drives a :class:`Stage` (the trial: its clock, its replicas, its ledger) through
one workload and returns the measured :class:`Window`; what is measured in that window is
:mod:`bench.measure`'s business.

* :class:`Periods`: the plan current when the replicas start is marked as run, they warm up,
  then whole periods are measured until every measured plan has run or one period (at most
  ``drain_cap_s``) after the last one was due.
* :class:`CatchUpStorm`: the replicas come back after ``downtime_s``, just after a plan fell
  due, with every missed plan due at once; measured from their start until that backlog
  has run (or ``window_s``).
* :class:`Idle`: nothing falls due; ``window_s`` of idle ticks after the warm-up, once the
  replicas have settled (their first sight of the scopes done, at most ``SETTLE_CAP_S``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from bench.peers.common import floor_plan
from bench.workloads import Workload

# A catch-up storm starts this long after a plan fell due (the clock read is not exact).
STORM_OFFSET_S = 0.5
# An idle window waits at most this long after the warm-up for the replicas to settle.
SETTLE_CAP_S = 120.0


@dataclass(frozen=True)
class Window:
    start: datetime  # the measurement's start
    plans: list[datetime]  # the plans measured
    origin: datetime | None = None  # a catch-up storm: when the whole backlog fell due
    # An idle window: seconds from the replicas' start until they had settled (None: not
    # within the cap, so the window still holds their first sight).
    settled_s: float | None = None


class Stage(Protocol):
    """What a timeline needs from the trial it drives."""

    def now(self) -> datetime: ...
    def sleep_until(self, t: datetime) -> None: ...
    def prepopulate(self, plan: datetime) -> None: ...
    def start_replicas(self) -> datetime: ...
    def begin_measurement(self, from_zero: bool = False) -> None: ...
    def alive(self) -> bool: ...
    def completed(self, plans: list[datetime]) -> int: ...
    def settled(self) -> bool: ...


class Timeline(Protocol):
    def run(self, stage: Stage, now: datetime) -> Window: ...


def timeline(wl: Workload, warmup_s: float, drain_cap_s: float) -> Timeline:
    """The timeline of ``wl``; the warm-up grows by a second per 25,000 scopes."""
    warmup = timedelta(seconds=warmup_s + wl.scopes / 25_000)
    if wl.catch_up:
        return CatchUpStorm(wl)
    if wl.idle:
        return Idle(wl, warmup)
    return Periods(wl, warmup, drain_cap_s)


def plans_between(base: datetime, now: datetime, every_s: int) -> list[datetime]:
    """Cadence plans in ``(base, now]``."""
    out, p = [], base + timedelta(seconds=every_s)
    while p <= now:
        out.append(p)
        p += timedelta(seconds=every_s)
    return out


def wait_for_plans(
    stage: Stage,
    wl: Workload,
    plans: Callable[[], list[datetime]],
    until: datetime,
    poll_s: float,
) -> None:
    """Until every plan has run for every scope, ``until`` passes, or a replica exits."""
    while stage.now() < until and stage.alive():
        due = plans()
        if stage.completed(due) >= len(due) * wl.scopes:
            return
        time.sleep(poll_s)


@dataclass(frozen=True)
class Periods:
    wl: Workload
    warmup: timedelta
    drain_cap_s: float

    def run(self, stage: Stage, now: datetime) -> Window:
        wl, every = self.wl, timedelta(seconds=self.wl.every_s)
        t0 = floor_plan(now + self.warmup + timedelta(seconds=1), wl.every_s) + every
        spawn = t0 - self.warmup
        stage.prepopulate(floor_plan(spawn, wl.every_s))
        stage.sleep_until(spawn)
        stage.start_replicas()
        stage.sleep_until(t0)
        stage.begin_measurement()
        plans = [t0 + every * k for k in range(wl.periods)]
        last = t0 + every * (wl.periods - 1)
        stage.sleep_until(last + timedelta(seconds=1))
        cap = last + timedelta(seconds=min(wl.every_s, self.drain_cap_s))
        wait_for_plans(stage, wl, lambda: plans, cap, poll_s=1)
        return Window(t0, plans)


@dataclass(frozen=True)
class CatchUpStorm:
    wl: Workload

    def run(self, stage: Stage, now: datetime) -> Window:
        # The replicas come back just after a plan fell due and the backlog measured is the
        # plans due then: where in the period the bench happened to be must not decide
        # whether a scheduler's storm holds one more plan (one that falls due while it runs).
        wl = self.wl
        back = floor_plan(now, wl.every_s) + timedelta(seconds=wl.every_s)
        base = back - timedelta(seconds=wl.downtime_s)
        stage.prepopulate(base)
        stage.sleep_until(back + timedelta(seconds=STORM_OFFSET_S))
        stage.begin_measurement(from_zero=True)  # the replicas' start-up is part of it
        spawned = stage.start_replicas()
        backlog = plans_between(base, spawned, wl.every_s)
        deadline = spawned + timedelta(seconds=wl.window_s)
        wait_for_plans(stage, wl, lambda: backlog, deadline, poll_s=2)
        return Window(spawned, backlog, origin=spawned)


@dataclass(frozen=True)
class Idle:
    wl: Workload
    warmup: timedelta

    def run(self, stage: Stage, now: datetime) -> Window:
        stage.prepopulate(floor_plan(now, self.wl.every_s))
        started = stage.start_replicas()
        stage.sleep_until(started + self.warmup)
        cap = stage.now() + timedelta(seconds=SETTLE_CAP_S)
        settled = stage.settled()
        while not settled and stage.now() < cap and stage.alive():
            stage.sleep_until(stage.now() + timedelta(seconds=0.5))
            settled = stage.settled()
        t0 = stage.now()
        stage.begin_measurement()
        stage.sleep_until(t0 + timedelta(seconds=self.wl.window_s))
        return Window(t0, [], settled_s=(t0 - started).total_seconds() if settled else None)
