"""The claims' statements: a claim transaction's first statement, the claim lock of a
``max_running`` job, the stale leases closed, the rows taken over (steals, retries, PENDING
runs), and the due cursors read and their plans claimed, of one job or of several jobs at
once (a joint claim)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from .._records import ClaimTerms, CursorMove, DueCursor, JointTerms, Row, WonPlan, running_before
from .names import Exec
from .statements import PLAN_EACH_TIME, Conn, Statements, ms, plan_span


class ClaimStore(Statements):
    """Statements of the claim transactions (engine/claims.py, engine/joint.py)."""

    async def claim_begin(
        self, conn: Conn, idle: timedelta, lock: timedelta, *, synchronous: bool = False
    ) -> None:
        """Open a claim transaction: the server ends it if it sits idle for ``idle``, and
        fails a statement of it that waits ``lock`` for a lock; with ``synchronous``, it
        commits only once a synchronous standby has it (one statement either way)."""
        name: Exec = "claim_begin_synchronous" if synchronous else "claim_begin"
        params = {"idle_ms": ms(idle), "lock_ms": ms(lock)}
        await self._exec(conn, name, params)

    async def try_lock_job(self, conn: Conn, job: str) -> bool:
        """Take the job's claim lock for this transaction if it is free (max_running jobs)."""
        key = f"pgsched.claim:{self.schema}:{job}"
        return bool((await self._one(conn, "try_lock_job", {"key": key}))["locked"])

    async def running_count(self, conn: Conn, job: str) -> int:
        return int((await self._one(conn, "running_count", {"job": job}))["running"])

    async def close_stale(self, conn: Conn, job: str, *, reentry: bool) -> list[Row]:
        return await self._many(conn, "close_stale", {"job": job, "reentry": reentry})

    async def claim_existing(self, conn: Conn, terms: ClaimTerms, limit: int) -> list[Row]:
        """Take over stale (steal), retryable and due PENDING rows, oldest plan first. Under
        overlap="forbid" only rows of scopes whose lock and cursor row (or stored schedule)
        this transaction got first (another claim holding either has its scope skipped for
        this tick)."""
        params = {**terms.params(), "limit": limit, "lock_ns": self.lock_ns}
        kinds: list[str] = []
        ids: list[str] = []
        if terms.forbid:
            for row in await self._many(conn, "lock_existing_scopes", params):
                kinds.append(row["scope_kind"])
                ids.append(row["scope_id"])
            if not kinds:
                return []
        params.update(locked_kinds=kinds, locked_ids=ids)
        return await self._many(conn, "claim_existing", prepare=PLAN_EACH_TIME, params=params)

    async def due_cursors(
        self, conn: Conn, terms: ClaimTerms, delay: timedelta, limit: int
    ) -> list[DueCursor]:
        """Lock up to ``limit`` due cursors of the job (SKIP LOCKED), soonest first."""
        params = {**terms.params(), "delay": delay, "limit": limit}
        return await self._tuples(conn, "due_cursors", DueCursor, params, prepare=PLAN_EACH_TIME)

    async def claim_cursors(
        self,
        conn: Conn,
        terms: ClaimTerms,
        spec: str,
        moves: Sequence[CursorMove],
        tids: Sequence[str],
    ) -> tuple[list[WonPlan], int]:
        """Insert RUNNING rows for the moves' plans and move each cursor on (``tids``: where
        due_cursors read each move's cursor, in the same order); returns the plans this
        replica won, and how many cursors were not where it read them."""
        plans = [(m.kind, m.id, p) for m in moves for p in m.plans]
        params = {
            **terms.params(),
            "spec": spec,
            "plan_kinds": [k for k, _, _ in plans],
            "plan_ids": [i for _, i, _ in plans],
            "plans": [p for _, _, p in plans],
            "kinds": [m.kind for m in moves],
            "ids": [m.id for m in moves],
            "nexts": [m.next_plan for m in moves],
            "dues": [m.due_at for m in moves],
            "lasts": [max(m.plans, default=None) for m in moves],
            "tids": list(tids),
            **plan_span(p for _, _, p in plans),
        }
        won = await self._tuples(conn, "claim_cursors", WonPlan, params, prepare=PLAN_EACH_TIME)
        return [plan for plan in won if plan.id is not None], won[0].unmoved

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
            conn, "due_cursors_of_jobs", DueCursor, params, prepare=PLAN_EACH_TIME
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
            **plan_span(p for _, _, _, p in plans),
        }
        won = await self._tuples(
            conn, "claim_cursors_of_jobs", WonPlan, params, prepare=PLAN_EACH_TIME
        )
        return [plan for plan in won if plan.id is not None], won[0].unmoved
