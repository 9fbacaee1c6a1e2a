"""The joint claim's statements: the due cursors of several jobs read, and their plans
claimed, in one statement each (``due_cursors_of_jobs``, ``claim_cursors_of_jobs``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from .._records import CursorMove, DueCursor, JointTerms, WonPlan, running_before
from .store import _PLAN_EACH_TIME, Conn, _plan_span, _Statements


class JointStore(_Statements):
    """Statements of joint claims (engine/joint.py)."""

    async def due_cursors_of_jobs(
        self, conn: Conn, terms: Sequence[JointTerms], clock: datetime
    ) -> list[DueCursor]:
        """Lock up to each job's limit of its due cursors (SKIP LOCKED), soonest first; each
        row names its job. ``clock``: the tick's (RUNNING rows are looked for before it)."""
        params = {
            "running_before": running_before(clock),
            "forbids": [t.forbid for t in terms],
            "jobs": [t.job for t in terms],
            "delays": [t.delay for t in terms],
            "limits": [t.limit for t in terms],
        }
        return await self._tuples(
            conn, "due_cursors_of_jobs", DueCursor, params, prepare=_PLAN_EACH_TIME
        )

    async def claim_cursors_of_jobs(
        self,
        conn: Conn,
        runner: str,
        terms: Sequence[JointTerms],
        clock: datetime,
        moves: Mapping[str, Sequence[tuple[CursorMove, str]]],
    ) -> tuple[list[WonPlan], int]:
        """Insert RUNNING rows for the moves' plans and move each cursor on (``moves``: per
        job, each move with where the read found its cursor); returns the plans this replica
        won, each naming its job, and how many cursors were not where the read found them."""
        moved = [(job, m, tid) for job, ms in moves.items() for m, tid in ms]
        plans = [(job, m.kind, m.id, p) for job, m, _ in moved for p in m.plans]
        params = {
            "runner": runner,
            "running_before": running_before(clock),
            "forbids": [t.forbid for t in terms],
            "jobs": [t.job for t in terms],
            "specs": [t.spec for t in terms],
            "max_attempts": [t.max_attempts for t in terms],
            "stale_timeouts": [t.stale_timeout for t in terms],
            "plan_jobs": [j for j, _, _, _ in plans],
            "plan_kinds": [k for _, k, _, _ in plans],
            "plan_ids": [i for _, _, i, _ in plans],
            "plans": [p for _, _, _, p in plans],
            "move_jobs": [j for j, _, _ in moved],
            "kinds": [m.kind for _, m, _ in moved],
            "ids": [m.id for _, m, _ in moved],
            "nexts": [m.next_plan for _, m, _ in moved],
            "dues": [m.due_at for _, m, _ in moved],
            "lasts": [max(m.plans, default=None) for _, m, _ in moved],
            "tids": [tid for _, _, tid in moved],
            **_plan_span(p for _, _, _, p in plans),
        }
        won = await self._tuples(
            conn, "claim_cursors_of_jobs", WonPlan, params, prepare=_PLAN_EACH_TIME
        )
        return [plan for plan in won if plan.id is not None], won[0].unmoved
