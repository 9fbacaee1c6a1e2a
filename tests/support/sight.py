"""A stand-in for first sight in tests written for a job whose current plan runs as soon as
the job is registered (a job ``every="1d"`` run once runs today's plan). With it, a scope's
first plan is its newest due one, as before cursors; tests of first sight itself (marked
``first_sight``) run without it, so a plan from before the scope was first seen does not run.
The tests' subprocesses get the same stand-in from ``stand_in/sitecustomize.py``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any


def newest_due_at_first_sight(job: Any, seen_at: datetime, lookback: timedelta) -> datetime | None:
    horizon = seen_at - job.schedule_delay
    plan: datetime | None = job.schedule.latest_at_or_before(horizon)
    return plan if plan is not None else job.schedule.next_after(horizon)
