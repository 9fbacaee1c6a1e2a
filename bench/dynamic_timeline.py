"""When the schedules are put and which window is measured, for the schedules-as-data
workloads (g, h, i). Like :mod:`bench.timeline`, a timeline drives a stage (the trial) and
returns the measured :class:`~bench.timeline.Window`.

* :class:`BulkPutIdle` (g): the replicas start and register the job, the driver puts the
  schedules in batches (the put rate is the driver's), and after the replicas have settled
  ``window_s`` of idle ticks are measured: none of the schedules is due in the next hour.
* :class:`DueMinute` (h): the schedules (``* * * * *``) are put, then whole minutes are
  measured from the first minute every replica has seen them.
* :class:`ChurnWhileRunning` (i): the schedules (cadences of 10-30 s) are put, then the
  driver replaces and deletes them for ``window_s`` while their plans run; the window ends
  once no plan due during the churn has started for a few seconds (at most a minute), so
  every plan due during it has had time to start.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from bench.timeline import Window, wait_for_plans
from bench.workloads import Workload


class DynamicStage(Protocol):
    settle_s: float

    def now(self) -> datetime: ...
    def sleep_until(self, t: datetime) -> None: ...
    def start_replicas(self) -> datetime: ...
    def begin_measurement(self, from_zero: bool = False) -> None: ...
    def alive(self) -> bool: ...
    def completed(self, plans: list[datetime]) -> int: ...
    def put(self, kind: str) -> dict[str, Any]: ...
    def churn(self) -> dict[str, Any]: ...
    def drain(self, plans_until: float) -> None: ...


class DynamicTimeline(Protocol):
    def run(self, stage: DynamicStage, now: datetime) -> Window: ...


def after(t: datetime, seconds: float) -> datetime:
    return t + timedelta(seconds=seconds)


def next_minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0) + timedelta(minutes=1)


def warm_up(stage: DynamicStage, warmup: timedelta) -> None:
    stage.sleep_until(stage.start_replicas() + warmup)


@dataclass(frozen=True)
class BulkPutIdle:
    wl: Workload
    warmup: timedelta

    def run(self, stage: DynamicStage, now: datetime) -> Window:
        warm_up(stage, self.warmup)
        stage.put("bulk")
        t0 = after(stage.now(), stage.settle_s + self.warmup.total_seconds())
        stage.sleep_until(t0)
        stage.begin_measurement()
        stage.sleep_until(after(t0, self.wl.window_s))
        return Window(t0, [])


@dataclass(frozen=True)
class DueMinute:
    wl: Workload
    warmup: timedelta
    drain_cap_s: float

    def run(self, stage: DynamicStage, now: datetime) -> Window:
        warm_up(stage, self.warmup)
        stage.put("due")
        t0 = next_minute(after(stage.now(), stage.settle_s))
        stage.sleep_until(t0)
        stage.begin_measurement()
        plans = [t0 + timedelta(minutes=k) for k in range(self.wl.periods)]
        stage.sleep_until(after(plans[-1], 1))
        cap = after(plans[-1], min(60, self.drain_cap_s))
        wait_for_plans(stage, self.wl, lambda: plans, cap, poll_s=1)  # type: ignore[arg-type]
        return Window(t0, plans)


@dataclass(frozen=True)
class ChurnWhileRunning:
    wl: Workload
    warmup: timedelta

    def run(self, stage: DynamicStage, now: datetime) -> Window:
        warm_up(stage, self.warmup)
        stage.put("churn")
        t0 = after(stage.now(), stage.settle_s)
        stage.sleep_until(t0)
        stage.begin_measurement()
        churn = stage.churn()
        stage.sleep_until(after(stage.now(), stage.settle_s))
        stage.drain(churn["finished"])
        return Window(t0, [])


def dynamic_timeline(wl: Workload, warmup_s: float, drain_cap_s: float) -> DynamicTimeline:
    warmup = timedelta(seconds=warmup_s)
    if wl.schedules == "bulk":
        return BulkPutIdle(wl, warmup)
    if wl.schedules == "due":
        return DueMinute(wl, warmup, drain_cap_s)
    return ChurnWhileRunning(wl, warmup)
