"""The dashboard's statements: bounded, indexed reads of a job's plans, scopes and cells, the
"retry now" write, the action log (migration 0011) and the dashboard's sessions (0020)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

from .._records import ActionRow, Row
from .._structures import (
    ActionRecord,
    Execution,
    JobStatus,
    PlanSummary,
    Scope,
    UpcomingPlan,
    trusted_scope,
)
from .names import Many
from .statements import Conn, Statements, record_params

# Rows read per plan for its summary: a fan-out's colour and charts come from a sample.
PLAN_SAMPLE = 500
_FAR_FUTURE = datetime(9999, 12, 31, tzinfo=UTC)  # "no bound" for plan times before


class DashboardStore(Statements):
    """Statements of the dashboard (``dash_*``, ``retry_now``, the action log)."""

    async def job_summary(self, conn: Conn, cap: int) -> list[JobStatus]:
        async with conn.transaction():
            await self._exec(conn, "no_jit")
            return await self._many_as(conn, "dash_job_summary", JobStatus, {"cap": cap})

    async def recent_plans(
        self, conn: Conn, job: str, before: datetime | None, limit: int
    ) -> list[datetime]:
        params = {"job": job, "before": before or _FAR_FUTURE, "limit": limit}
        return [r["plan_time"] for r in await self._many(conn, "dash_recent_plans", params)]

    async def plan_summaries(
        self, conn: Conn, job: str, plans: Sequence[datetime]
    ) -> list[PlanSummary]:
        params = {"job": job, "plans": list(plans), "sample": PLAN_SAMPLE}
        async with conn.transaction():
            await self._exec(conn, "no_jit")
            return await self._many_as(conn, "dash_plan_summaries", PlanSummary, params)

    async def scope_kinds(self, conn: Conn, job: str, *, schedules: bool) -> list[str]:
        name: Many = "dash_schedule_kinds" if schedules else "dash_scope_kinds"
        return [r["kind"] for r in await self._many(conn, name, {"job": job})]

    async def ledger_scopes(
        self, conn: Conn, job: str, kind: str, after: str, prefix: str, limit: int
    ) -> list[Scope]:
        params = {"job": job, "kind": kind, "after": after, "prefix": prefix, "limit": limit}
        rows = await self._many(conn, "dash_ledger_scopes", params)
        return [trusted_scope(r["kind"], r["id"]) for r in rows]

    async def schedules_page(
        self, conn: Conn, job: str, kind: str, after: str, prefix: str, limit: int
    ) -> list[Row]:
        params = {"job": job, "kind": kind, "after": after, "prefix": prefix, "limit": limit}
        return await self._many(conn, "dash_schedules", params)

    async def cells(
        self, conn: Conn, job: str, scopes: Sequence[Scope], plans: Sequence[datetime]
    ) -> list[Execution]:
        params = {**_scope_arrays(scopes), "job": job, "plans": list(plans)}
        return await self._many_as(conn, "dash_cells", Execution, params)

    async def scope_runs(
        self, conn: Conn, job: str, scopes: Sequence[Scope], per_scope: int
    ) -> list[Execution]:
        params = {**_scope_arrays(scopes), "job": job, "per_scope": per_scope}
        return await self._many_as(conn, "dash_scope_runs", Execution, params)

    async def job_failures(self, conn: Conn, job: str, limit: int) -> list[Execution]:
        params = {"job": job, "limit": limit}
        return await self._many_as(conn, "dash_job_failures", Execution, params)

    async def pending(self, conn: Conn, job: str, limit: int) -> list[Execution]:
        return await self._many_as(conn, "dash_pending", Execution, {"job": job, "limit": limit})

    async def upcoming(self, conn: Conn, job: str, limit: int) -> list[UpcomingPlan]:
        params = {"job": job, "limit": limit}
        return await self._many_as(conn, "dash_upcoming", UpcomingPlan, params)

    async def retry_now(self, conn: Conn, execution_id: UUID) -> str | None:
        """The job of the FAILED execution made due now; None when it is not FAILED."""
        row = await self._opt(conn, "retry_now", {"id": execution_id})
        return None if row is None else str(row["job_name"])

    async def execution_status(self, conn: Conn, execution_id: UUID) -> str | None:
        row = await self._opt(conn, "execution_status", {"id": execution_id})
        return None if row is None else str(row["status"])

    async def record_action(self, conn: Conn, row: ActionRow) -> None:
        await self._exec(conn, "record_action", record_params(row))

    async def actions(self, conn: Conn, job: str | None, limit: int) -> list[ActionRecord]:
        if job is None:
            return await self._many_as(conn, "list_actions", ActionRecord, {"limit": limit})
        params = {"job": job, "limit": limit}
        return await self._many_as(conn, "list_job_actions", ActionRecord, params)

    async def open_session(
        self, conn: Conn, id_hash: bytes, role: str, actor: str, lifetime: timedelta
    ) -> datetime:
        """Store a session (and remove those past their end); returns when it ends."""
        params = {"id_hash": id_hash, "role": role, "actor": actor, "lifetime": lifetime}
        row = await self._one(conn, "open_session", params)
        return row["expires_at"]  # type: ignore[no-any-return]

    async def find_session(self, conn: Conn, id_hash: bytes) -> Row | None:
        return await self._opt(conn, "find_session", {"id_hash": id_hash})

    async def close_session(self, conn: Conn, id_hash: bytes) -> None:
        await self._exec(conn, "close_session", {"id_hash": id_hash})


def _scope_arrays(scopes: Sequence[Scope]) -> dict[str, list[str]]:
    return {"kinds": [s.kind for s in scopes], "ids": [s.id for s in scopes]}
