"""Plan instants a test chooses: a job ticked several times by a test sees the same plans
wherever in the minute, hour or day the test runs (an ``every="1h"`` job gets a new plan when
the test crosses the hour)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


class FixedPlans:
    """A ``planner=`` with the given plan instants and no others."""

    def __init__(self, *plans: datetime) -> None:
        self.plans = sorted(plans)

    def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
        return [p for p in self.plans if start < p <= end]


def past_plan(db: Any, ago: timedelta = timedelta(minutes=1)) -> datetime:
    """An instant ``ago`` before the database's now (whole seconds): due, and within the
    default catch-up window."""
    row = db.execute("SELECT now()").fetchone()
    now: datetime = row[0]
    return now.replace(microsecond=0) - ago


def catch_up_options(catch_up: str, jitter_s: int, max_lateness: str | None) -> dict[str, Any]:
    """A job's catch-up options as the batch-decision properties draw them (``every_plan``
    with the options it requires)."""
    every_plan: dict[str, Any] = (
        {"max_plans_per_tick": 3, "catch_up_window": "1h"} if catch_up == "every_plan" else {}
    )
    return {
        "catch_up": catch_up,
        "jitter": timedelta(seconds=jitter_s),
        "max_lateness": max_lateness,
        **every_plan,
    }
