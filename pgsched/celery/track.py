"""``pgsched.celery.track(app)`` in a Celery worker: each run of a task a pgsched beat sent
(its task id is the execution id) is kept as an attempt of that execution, with the worker,
its start and end, and the traceback when it failed; the task's final outcome becomes the
execution's status. ``pgsched runs``, ``status``, the gauges and the dashboard then show
whether the work ran, not only whether it was sent.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from celery import Celery, signals

from .._errors import describe_error
from .._facades.admin import Admin
from .._records import TaskAttempt
from .beat import BeatSettings

_log = logging.getLogger("pgsched.celery")
# A task can end before the beat has written its publish (the row is still RUNNING then):
# its outcome is applied again after these delays (seconds), past a dead beat's takeover.
_SETTLE_DELAYS = (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0)


class Tracker:
    """The signal receivers of one tracked app, and the ``Admin`` each worker process writes
    through (a prefork child opens its own)."""

    def __init__(self, app: Celery) -> None:
        self._settings = BeatSettings.from_app(app)
        self._admin: tuple[int, Admin] | None = None
        self._started: dict[str, float] = {}  # task id -> when its run began (monotonic)
        self._lock = threading.Lock()

    def connect(self) -> None:
        uid = f"pgsched.celery.track:{id(self)}"
        signals.task_prerun.connect(self.started, weak=False, dispatch_uid=f"{uid}:prerun")
        signals.task_success.connect(self.succeeded, weak=False, dispatch_uid=f"{uid}:ok")
        signals.task_failure.connect(self.failed, weak=False, dispatch_uid=f"{uid}:failed")
        signals.task_retry.connect(self.retried, weak=False, dispatch_uid=f"{uid}:retry")

    def started(self, sender: Any = None, task_id: str | None = None, **_: Any) -> None:
        if task_id is not None and _execution_id(sender) is not None:
            with self._lock:
                self._started[task_id] = time.monotonic()

    def succeeded(self, sender: Any = None, **_: Any) -> None:
        self._record(sender, "SUCCESS")

    def failed(
        self,
        sender: Any = None,
        exception: BaseException | None = None,
        einfo: Any = None,
        **_: Any,
    ) -> None:
        self._record(sender, "FAILED", "task_failed", exception, einfo)

    def retried(self, sender: Any = None, reason: Any = None, einfo: Any = None, **_: Any) -> None:
        error = reason if isinstance(reason, BaseException) else None
        self._record(sender, "FAILED", "task_retried", error, einfo, reason, final=False)

    def _record(
        self,
        task: Any,
        status: str,
        error_code: str | None = None,
        error: BaseException | None = None,
        einfo: Any = None,
        reason: Any = None,
        *,
        final: bool = True,
    ) -> None:
        execution = _execution_id(task)
        if execution is None:
            return  # not a task a pgsched beat sent
        with self._lock:
            began = self._started.pop(execution, None)
        message = None
        if error is not None:
            message = f"{type(error).__name__}: {error}"
        elif reason is not None:
            message = str(reason)
        attempt = TaskAttempt(
            runner_id=str(getattr(task.request, "hostname", None) or f"celery@{os.uname()[1]}"),
            elapsed=max(0.0, time.monotonic() - began) if began is not None else 0.0,
            status=status,
            error_code=error_code,
            error_msg=message,
            traceback=str(einfo.traceback) if getattr(einfo, "traceback", None) else None,
            final=final,
        )
        try:
            recorded = self._admin_here().record_task_attempt(execution, attempt)
        except Exception as exc:  # the task's outcome stands whatever the record does
            _log.warning(
                "pgsched could not record the attempt of execution %s: %s",
                execution,
                describe_error(exc),
            )
            return
        if final and recorded is not None and recorded.execution_status == "RUNNING":
            self._settle_later(execution, 0)

    def _settle_later(self, execution: str, step: int) -> None:
        """Apply the outcome once the beat has written its publish, on a timer thread (the
        worker goes on with its next task)."""
        if step >= len(_SETTLE_DELAYS):
            _log.warning(
                "pgsched left execution %s RUNNING: its publish was not written", execution
            )
            return
        timer = threading.Timer(_SETTLE_DELAYS[step], self._settle, (execution, step))
        timer.daemon = True
        timer.start()

    def _settle(self, execution: str, step: int) -> None:
        try:
            settled = self._admin_here().settle_task(execution)
        except Exception as exc:  # the next delay tries again
            _log.warning(
                "pgsched could not settle execution %s: %s", execution, describe_error(exc)
            )
            self._settle_later(execution, step + 1)
            return
        if settled is not None and settled.execution_status == "RUNNING":
            self._settle_later(execution, step + 1)

    def _admin_here(self) -> Admin:
        pid = os.getpid()
        if self._admin is None or self._admin[0] != pid:
            settings = self._settings
            self._admin = (pid, Admin(dsn=settings.dsn, schema=settings.schema))
        return self._admin[1]


def _execution_id(task: Any) -> str | None:
    """The execution a task's run belongs to: its id, when its headers say it is one."""
    request = getattr(task, "request", None)
    if request is None:
        return None
    named = getattr(request, "pgsched_execution_id", None)
    if named is None:
        named = (getattr(request, "headers", None) or {}).get("pgsched_execution_id")
    task_id = getattr(request, "id", None)
    return task_id if named is not None and named == task_id else None


def track(app: Celery) -> Tracker:
    """Record, in the worker that calls this (once, at import of the app), every run of a task
    a pgsched beat sent as an attempt of its execution: ``SUCCESS``, or ``FAILED`` with
    ``task_failed`` (or ``task_retried``), the error and its traceback. The database is the
    beat's (``beat_pgsched_dsn`` / ``PGSCHED_DSN``..., ``beat_pgsched_schema``)."""
    tracker = Tracker(app)
    tracker.connect()
    return tracker
