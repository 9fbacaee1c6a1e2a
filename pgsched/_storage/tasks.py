"""Statements about the tasks executions sent to a consumer (``pgsched.celery.track``)."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from .._records import PreviousTask, RecordedTask, TaskAttempt
from .._structures import Scope
from .statements import Conn, Statements, record_params


class TaskStore(Statements):
    """Statements about the tasks executions sent to a consumer."""

    async def record_task_attempt(
        self, conn: Conn, execution_id: UUID, attempt: TaskAttempt
    ) -> RecordedTask | None:
        """Keep a consumer's run as an attempt (a final outcome of a Celery job's task becomes
        the execution's status); None if no such execution."""
        params = {"id": execution_id, **record_params(attempt)}
        row = await self._opt(conn, "record_task_attempt", params)
        if row is None:
            return None
        return RecordedTask(int(row["attempt"]), row["execution_status"], row["changed"])

    async def settle_task(self, conn: Conn, execution_id: UUID) -> RecordedTask | None:
        """The newest final outcome kept for the execution becomes its status, when its row
        allows; None if no such execution."""
        row = await self._opt(conn, "settle_task", {"id": execution_id})
        if row is None:
            return None
        return RecordedTask(None, row["execution_status"], row["changed"])

    async def previous_task(
        self, conn: Conn, job: str, scope: Scope, plan_time: datetime, lost_after: float
    ) -> PreviousTask | None:
        """The scope's newest earlier plan whose task was sent, and whether it has an outcome."""
        params = {
            "job": job,
            "kind": scope.kind,
            "scope_id": scope.id,
            "plan": plan_time,
            "lost_after": lost_after,
        }
        row = await self._opt(conn, "previous_task", params)
        if row is None:
            return None
        return PreviousTask(row["id"], row["outcome"], float(row["left_s"]))
