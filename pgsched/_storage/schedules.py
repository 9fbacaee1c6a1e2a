"""Statements on the ``schedules`` table of dynamic jobs (docs/schedules.md)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from .._records import ClaimTerms, DueSchedule, Row, ScheduleMove, ScheduleRows, WonPlan
from .statements import PLAN_EACH_TIME, Conn, Statements, plan_span, record_params


class ScheduleStore(Statements):
    """Statements on the ``schedules`` table of dynamic jobs."""

    async def put_schedules(self, conn: Conn, job: str, rows: ScheduleRows) -> int:
        """Upsert ``rows``; returns how many were written (identical ones are not)."""
        params = {"job": job, **record_params(rows)}
        return await self._exec(conn, "put_schedules", params)

    async def analyze_schedules(self, conn: Conn) -> None:
        """Refresh the planner's statistics of the schedules (owner only; skipped else)."""
        await self._exec(conn, "analyze_schedules")

    async def get_schedule(self, conn: Conn, job: str, kind: str, ident: str) -> Row | None:
        return await self._opt(conn, "get_schedule", {"job": job, "kind": kind, "id": ident})

    async def list_schedules(
        self, conn: Conn, job: str, after: tuple[str, str] | None, limit: int
    ) -> list[Row]:
        kind, ident = after if after is not None else (None, None)
        params = {"job": job, "kind": kind, "id": ident, "limit": limit}
        return await self._many(conn, "list_schedules", params)

    async def delete_schedule(self, conn: Conn, job: str, kind: str, ident: str) -> bool:
        params = {"job": job, "kind": kind, "id": ident}
        return await self._opt(conn, "delete_schedule", params) is not None

    async def set_schedule_paused(
        self, conn: Conn, job: str, kind: str, ident: str, paused: bool
    ) -> bool:
        params = {"job": job, "kind": kind, "id": ident, "paused": paused}
        return await self._opt(conn, "set_schedule_paused", params) is not None

    async def due_schedules(
        self, conn: Conn, terms: ClaimTerms, delay: timedelta, limit: int
    ) -> list[DueSchedule]:
        """Lock up to ``limit`` due schedules of the job (SKIP LOCKED), oldest next plan first."""
        params = {**terms.params(), "delay": delay, "limit": limit}
        return await self._tuples(
            conn, "due_schedules", DueSchedule, params, prepare=PLAN_EACH_TIME
        )

    async def claim_schedules(
        self, conn: Conn, terms: ClaimTerms, moves: Sequence[ScheduleMove], tids: Sequence[str]
    ) -> tuple[list[WonPlan], int]:
        """Insert RUNNING rows for the moves with a plan, and move each schedule's next plan
        on (``tids``: where due_schedules read each move's schedule, in the same order);
        returns the rows this replica won, and how many schedules were not where it read
        them."""
        params = {
            **terms.params(),
            "kinds": [m.kind for m in moves],
            "ids": [m.id for m in moves],
            "plans": [m.plan for m in moves],
            "nexts": [m.next_plan for m in moves],
            "tids": list(tids),
            **plan_span(m.plan for m in moves if m.plan is not None),
        }
        won = await self._tuples(conn, "claim_schedules", WonPlan, params, prepare=PLAN_EACH_TIME)
        return [plan for plan in won if plan.id is not None], won[0].unmoved
