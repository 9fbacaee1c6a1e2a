"""The operations core for the tasks executions send to a consumer (``pgsched.celery.track``):
a consumer's run of such a task kept as an attempt of its execution, so ``runs show``, the API
and the dashboard show whether the work ran, not only whether it was sent. Part of
:class:`~pgsched._operations.core.Operations`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from uuid import UUID

from .._errors import ConfigError
from .._records import PreviousTask, RecordedTask, TaskAttempt
from .._storage.statements import Conn
from .._storage.tasks import TaskStore
from .._structures import Scope

TASK_STATUSES = ("SUCCESS", "FAILED")
_TRACEBACK_BYTES = 16384  # cron_attempts' bound


class TaskOperations:
    """The task operations of :class:`~pgsched._operations.core.Operations` (which sets the
    attributes declared here)."""

    _tasks: TaskStore
    _conn: Callable[[], AbstractAsyncContextManager[Conn]]

    async def record_task_attempt(
        self, execution_id: UUID | str, attempt: TaskAttempt
    ) -> RecordedTask | None:
        """Keep ``attempt`` (a consumer's run of the task ``execution_id`` sent) as an attempt
        of that execution; a final outcome of a Celery job's task (``attempt.final``) becomes
        the execution's status when the publish made it SUCCESS (or an earlier run FAILED).
        None when there is no such execution."""
        ident = _execution_id(execution_id)
        if attempt.status not in TASK_STATUSES:
            raise ConfigError(
                f"execution {ident}: task status={attempt.status!r} must be SUCCESS or FAILED"
            )
        if not attempt.runner_id or attempt.elapsed < 0:
            raise ConfigError(
                f"execution {ident}: a task attempt needs a runner and elapsed >= 0"
                f" (got runner_id={attempt.runner_id!r}, elapsed={attempt.elapsed!r})"
            )
        kept = attempt
        if attempt.traceback is not None:
            # The newest frames and the error are at the end: keep those.
            tail = attempt.traceback.encode()[-_TRACEBACK_BYTES:].decode(errors="ignore")
            kept = TaskAttempt(
                attempt.runner_id,
                attempt.elapsed,
                attempt.status,
                attempt.error_code,
                attempt.error_msg,
                tail,
                attempt.final,
            )
        async with self._conn() as conn:
            return await self._tasks.record_task_attempt(conn, ident, kept)

    async def settle_task(self, execution_id: UUID | str) -> RecordedTask | None:
        """Make the newest final outcome recorded for ``execution_id`` its status, as
        ``record_task_attempt`` would have, had the row not still been RUNNING then."""
        ident = _execution_id(execution_id)
        async with self._conn() as conn:
            return await self._tasks.settle_task(conn, ident)

    async def previous_task(
        self, job: str, scope: Scope, plan_time: datetime, lost_after: float
    ) -> PreviousTask | None:
        """The newest plan of ``job``'s ``scope`` before ``plan_time`` whose task was sent,
        with whether its outcome is recorded; its task counts as lost ``lost_after`` seconds
        after its publish."""
        async with self._conn() as conn:
            return await self._tasks.previous_task(conn, job, scope, plan_time, lost_after)


def _execution_id(execution_id: UUID | str) -> UUID:
    try:
        return UUID(str(execution_id))
    except ValueError:
        raise ConfigError(f"execution id {execution_id!r} is not a UUID") from None
