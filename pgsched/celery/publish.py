"""Publishing a claimed plan's task: ``send_task`` on a connection of the beat's own with
publisher confirms (AMQP) and bounded retries, so the handler returns only once the broker
has the message, and raises when it could not be sent.
"""

from __future__ import annotations

import threading
from datetime import UTC
from typing import Any

from celery import Celery

from .._run import Run
from .entries import BeatEntry, scope_header

# Bounds on reaching the broker, well inside the job's run_timeout: a handler abandoned at its
# timeout could still publish later, after its retry published the same task id again.
_CONNECT = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
_PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.5, "interval_max": 1}
_ACQUIRE_TIMEOUT_S = 5.0


class Publisher:
    """Sends the tasks of a beat's claimed plans, one pooled broker connection per handler
    thread at a time (a kombu connection is not thread-safe)."""

    def __init__(self, app: Celery, limit: int) -> None:
        self._app = app
        self.stopping = threading.Event()  # the beat is stopping: send nothing new
        options = dict(_CONNECT)
        connection = app.connection_for_write()
        if connection.transport.driver_type == "amqp":
            # basic_publish waits for the broker's ack (a nack raises): the row is SUCCESS
            # only once RabbitMQ has the message. Redis's LPUSH answers when it is stored.
            options["confirm_publish"] = True
        connection.release()
        self._connection = app.connection_for_write(transport_options=options)
        self._pool = self._connection.Pool(limit=limit)

    def publish(self, entry: BeatEntry, run: Run) -> str:
        """Send ``entry``'s task for ``run``'s plan; its task id is the execution id."""
        args, kwargs = entry.call_args()
        return self.send(entry.task, args, kwargs, entry.options, run)

    def send(
        self,
        task: str,
        args: list[Any],
        kwargs: dict[str, Any],
        options: dict[str, Any],
        run: Run,
    ) -> str:
        """Send ``task`` with ``options`` (send_task's) for ``run``'s plan, pgsched's headers
        added; its task id is the execution id. Code entries and the schedules of the dynamic
        job ``celery`` both come here."""
        task_id = str(run.execution_id)
        options = dict(options)
        options["headers"] = {
            **(options.get("headers") or {}),
            "celery_beat_task": True,  # as Celery's own beat marks them
            "pgsched_plan_time": run.plan_time.astimezone(UTC).isoformat(),
            "pgsched_execution_id": task_id,
            **scope_header(run.scope),
        }
        options.setdefault("retry_policy", _PUBLISH_RETRY)
        with self._pool.acquire(block=True, timeout=_ACQUIRE_TIMEOUT_S) as conn:
            producer = self._app.amqp.Producer(conn, auto_declare=False)
            try:
                self._app.send_task(
                    task, args, kwargs, task_id=task_id, producer=producer, **options
                )
            except BaseException:
                conn.collect()  # a connection that failed is not lent again as it is
                raise
        return task_id

    def close(self) -> None:
        self._pool.force_close_all()
        self._connection.release()
