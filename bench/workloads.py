"""The benchmark's workloads: how many scopes, how often, and which timeline measures them.

A workload's fields go into the results JSON as they are (``report["workloads"]``); its
timeline (regular periods, a catch-up storm, or idle ticks) is in :mod:`bench.timeline`.
Standard library only: the chart reads these from the peers' virtualenv too.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    scopes: int
    every_s: int
    periods: int = 3  # whole periods measured (regular workloads)
    catch_up: bool = False  # every_plan after `downtime_s` of downtime
    downtime_s: int = 0
    # pgsched's overlap rule for the job. The limits have none: they start every plan they
    # claim at once, so a workload where a scope has several plans due together (the storm)
    # runs pgsched with "allow" to compare like with like ("forbid" runs a scope's plans one
    # after another, a rule the limits do not keep; docs/performance.md has its figure).
    overlap: str = "forbid"
    idle: bool = False  # nothing due: the cost of idle ticks
    window_s: int = 20  # idle: length of the window; catch-up: longest wait for the backlog
    peers: bool = True  # whether pgqueuer and procrastinate can run it at all
    why_no_peers: str = ""
    # Schedules as data (one dynamic job, its schedules put by a driver process): "bulk" (put
    # `scopes` random crons in batches of `batch`, then idle ticks), "due" (`scopes` schedules
    # due every minute), "churn" (`churn_per_s` replacements and deletes a second for
    # `window_s` while the plans run). Empty: a code-defined job (workloads a-f).
    schedules: str = ""
    batch: int = 10_000
    churn_per_s: int = 0


WORKLOADS = {
    w.key: w
    for w in (
        Workload("a", "200 scopes / 5 s", 200, 5, periods=4),
        Workload("b", "2,000 scopes / 10 s", 2_000, 10, periods=3),
        Workload("c", "10,000 scopes / 10 s", 10_000, 10, periods=3),
        Workload("d", "100,000 scopes / 60 s", 100_000, 60, periods=2),
        Workload(
            "e",
            "catch-up storm: 10,000 scopes, every_plan, 10 min down (60 s cadence)",
            10_000,
            60,
            catch_up=True,
            downtime_s=600,
            overlap="allow",
            window_s=150,
            peers=False,
            why_no_peers="has no every-plan catch-up across a restart: it runs a missed "
            "schedule once at most",
        ),
        Workload("f", "idle: 100,000 scopes, nothing due", 100_000, 3600, idle=True, window_s=20),
        Workload(
            "g",
            "schedules as data: 1,000,000 random crons over 24 zones put in batches of "
            "10,000, then idle ticks with none due",
            1_000_000,
            3600,
            idle=True,
            window_s=20,
            schedules="bulk",
        ),
        Workload(
            "h",
            "schedules as data: 10,000 schedules due at the same minute (* * * * *)",
            10_000,
            60,
            periods=3,
            schedules="due",
        ),
        Workload(
            "i",
            "schedules as data: 1,000 replacements and deletes/s for 60 s over 10,000 "
            "schedules firing every 10-30 s",
            10_000,
            10,
            window_s=60,
            schedules="churn",
            churn_per_s=1000,
        ),
    )
}
