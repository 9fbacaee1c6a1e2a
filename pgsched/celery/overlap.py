"""``options["pgsched"]["overlap"] = "forbid"`` on a ``beat_schedule`` entry: a plan's task is
sent only once the previous plan's task of the same scope has an outcome recorded by
``pgsched.celery.track(app)`` in a worker. The publishing handler waits for it, its lease
renewed as for any run, so pgsched's own overlap="forbid" defers the scope's later plans
meanwhile (superseded under catch_up="latest_only"). The entry's ``run_timeout`` bounds the
wait: a task with no outcome that long after its publish counts as lost.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from .._errors import PgschedError
from .._facades.admin import Admin
from .._run import Run
from .._times import parse_duration
from .entries import BeatEntry

# How often a waiting publish looks at the ledger for the previous task's outcome.
_POLL_S = 1.0
# Left of run_timeout for the publish itself (its connection and publish retries), so a
# handler never sends after the engine gave up on it: its retry would send the task again.
_PUBLISH_MARGIN_S = 10.0


class PreviousTaskUnfinished(PgschedError):
    """The previous plan's task has no outcome yet and this publish can wait no longer."""


class PreviousTasks:
    """Waits, in a publishing handler, for the outcome of the previous plan's task."""

    def __init__(self, admin: Callable[[], Admin], stopping: threading.Event) -> None:
        self._admin = admin
        self._stopping = stopping  # set when the beat stops: a waiting publish gives up

    def wait(self, entry: BeatEntry, run: Run) -> None:
        """Return once the scope's previous sent plan has an outcome, or counts as lost (a
        warning); raise :class:`PreviousTaskUnfinished` when this run's time is up first."""
        timeout = parse_duration(
            entry.job_options["run_timeout"], field="run_timeout", job=entry.job
        ).total_seconds()
        deadline = time.monotonic() + timeout - min(_PUBLISH_MARGIN_S, timeout / 4)
        logged = False
        while True:
            previous = self._admin().previous_task(run.job, run.scope, run.plan_time, timeout)
            if previous is None or previous.outcome:
                return
            task_id = str(previous.execution_id)
            if previous.left_s <= 0:
                run.log.warning("celery_previous_task_lost", task_id=task_id, run_timeout_s=timeout)
                return
            if not logged:
                run.log.info("celery_waiting_for_previous_task", task_id=task_id)
                logged = True
            left = deadline - time.monotonic()
            if left <= 0:
                raise PreviousTaskUnfinished(
                    f"job {run.job!r}: the previous task {task_id} has no outcome recorded"
                    f" yet; this plan is sent once it has, or once it is {timeout:g}s old"
                )
            run.heartbeat()  # LeaseLost: another beat has this plan now
            if self._stopping.wait(min(_POLL_S, left, previous.left_s)):
                raise PreviousTaskUnfinished(
                    f"job {run.job!r}: the beat stopped while waiting for task {task_id}"
                )
