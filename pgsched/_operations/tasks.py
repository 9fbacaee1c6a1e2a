"""The operations core for the tasks executions send to a consumer (``pgsched.celery.track``):
a consumer's run of such a task kept as an attempt of its execution, so ``runs show``, the API
and the dashboard show whether the work ran, not only whether it was sent. Part of
:class:`~pgsched._operations.core.Operations`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from uuid import UUID

from .._errors import ConfigError
from .._records import TaskAttempt
from .._storage.store import Conn, TaskStore

TASK_STATUSES = ("SUCCESS", "FAILED")
_TRACEBACK_BYTES = 16384  # cron_attempts' bound


class TaskOperations:
    """The task operations of :class:`~pgsched._operations.core.Operations` (which sets the
    attributes declared here)."""

    _tasks: TaskStore
    _conn: Callable[[], AbstractAsyncContextManager[Conn]]

    async def record_task_attempt(
        self, execution_id: UUID | str, attempt: TaskAttempt
    ) -> int | None:
        """Keep ``attempt`` (a consumer's run of the task ``execution_id`` sent) as an attempt
        of that execution; its attempt number, or None when there is no such execution."""
        try:
            ident = UUID(str(execution_id))
        except ValueError:
            raise ConfigError(f"execution id {execution_id!r} is not a UUID") from None
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
            )
        async with self._conn() as conn:
            return await self._tasks.record_task_attempt(conn, ident, kept)
