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
