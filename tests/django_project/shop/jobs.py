"""The shop's jobs, found by pgsched.django when the apps are loaded."""

from __future__ import annotations

import os
import time
from pathlib import Path

from pgsched import Calendar, Run
from pgsched.django import scheduler

from .models import Order


@scheduler.job(every="1s")
def restock(run: Run) -> int:
    # What the test sees: one file per run, named by the replica that ran it.
    marks = Path(os.environ["SHOP_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"{run.execution_id}").write_text(run.runner_id)
    return 1  # one shelf restocked


# The hourly jobs run when a test triggers them (never at a first sight of theirs).
@scheduler.job(
    every="1h", first_sight="next", transactional=True, run_timeout="10s", stale_timeout="11s"
)
def settle(run: Run) -> int:
    """An ORM write that commits with the run's SUCCESS. With SHOP_HOLD set, the run says so
    in that file once it has written, then waits (for the test to kill its replica)."""
    Order.objects.create(name=f"settled {run.execution_id}")
    hold = os.environ.get("SHOP_HOLD")
    if hold:
        Path(hold).write_text(str(run.execution_id))
        time.sleep(120)
    return int(Order.objects.count())


@scheduler.job(every="1h", first_sight="next")
def count_orders(run: Run) -> int:
    return int(Order.objects.count())


@scheduler.job(every="1h", first_sight="next")
async def tally(run: Run) -> int:
    await Order.objects.acreate(name=f"tally {run.execution_id}")
    return int(await Order.objects.acount())


@scheduler.job(every="1h", first_sight="next")
def audit(run: Run) -> None:
    """Fails whenever a test triggers it: its traceback is what the admin shows."""
    raise ValueError("ledger out of balance")


# A calendar remind's schedules may name (the admin's schedule form names it).
scheduler.calendar("shop-days", Calendar("mon-sat"))


@scheduler.job(dynamic=True)
def remind(run: Run) -> None:
    """A dynamic job: each scope's schedule is data (the admin's schedules page writes it)."""
