"""The operator's statements on the ledger: the clock, trigger, backfill, cancel, pause, the
job summary, runs and their attempts, failed attempts."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast
from uuid import UUID

from .._records import RunFilter
from .._structures import Attempt, Execution, FailedAttempt, JobStatus, RunHistory, Scope, Triggered
from .ledger import LedgerStatements
from .statements import PLAN_EACH_TIME, Conn


class OperatorStatements(LedgerStatements):
    """Statements of the operator's actions and reads (a trigger or backfill first creates the
    partitions its plans lack)."""

    async def now(self, conn: Conn) -> datetime:
        return cast(datetime, (await self._one(conn, "now"))["now"])

    async def trigger(
        self,
        conn: Conn,
        job: str,
        scope: Scope,
        plan: datetime,
        *,
        run_now: bool,
        max_attempts: int,
    ) -> Triggered:
        """A manual row of ``scope`` at ``plan`` (a run-now, or a one-off when not
        ``run_now``), or the row that holds it back (``created`` False)."""
        params: dict[str, Any] = {"job": job, "kind": scope.kind, "id": scope.id, "plan": plan}
        params.update(run_now=run_now, max_attempts=max_attempts, lock_ns=self.lock_ns)
        await self.ensure_partitions(conn, [plan])
        for _ in range(3):  # a concurrent trigger may commit between our insert and our read
            async with conn.transaction():
                await self._exec(conn, "lock_trigger_scope", params)
                row = await self._opt_as(conn, "trigger", Triggered, params)
            if row is not None:
                return row
        raise RuntimeError(f"job {job!r}: could not insert or find the triggered run")

    async def backfill(
        self,
        conn: Conn,
        job: str,
        kinds: list[str],
        ids: list[str],
        plans: list[datetime],
        max_attempts: int,
        *,
        pairs: bool = False,
    ) -> int:
        """PENDING rows for every plan of every scope, or with ``pairs`` for the scope and
        plan at each position of the three lists."""
        params: dict[str, Any] = {"job": job, "kinds": kinds, "ids": ids, "plans": plans}
        params.update(max_attempts=max_attempts, pairs=pairs)
        await self.ensure_partitions(conn, plans)
        return len(await self._many(conn, "backfill", params))

    async def cancel(self, conn: Conn, execution_id: UUID) -> str:
        """Cancel a PENDING row; returns ``"cancelled"``, the row's status, or ``"missing"``."""
        if await self._opt(conn, "cancel", {"id": execution_id}) is not None:
            return "cancelled"
        row = await self._opt(conn, "execution_status", {"id": execution_id})
        return "missing" if row is None else str(row["status"])

    async def set_paused(self, conn: Conn, job: str, paused: bool) -> None:
        await self._exec(conn, "set_paused", {"job": job, "paused": paused})

    async def job_summary(self, conn: Conn) -> list[JobStatus]:
        async with conn.transaction():
            await self._exec(conn, "no_jit")
            return await self._many_as(conn, "job_summary", JobStatus)

    async def list_runs(self, conn: Conn, chosen: RunFilter, limit: int) -> list[Execution]:
        params = {**chosen.params(), "limit": limit}
        # Planned for the filters given: a generic plan cannot use the index a filter needs
        # (the plan key for a scope, the partial index of a status) and would walk the job's
        # history instead.
        return await self._many_as(conn, "list_runs", Execution, params, prepare=PLAN_EACH_TIME)

    async def get_run(self, conn: Conn, execution_id: UUID) -> RunHistory | None:
        """The execution and its attempts (``get_run``, ``run_attempts``); None if unknown."""
        found = await self._opt_as(conn, "get_run", Execution, {"id": execution_id})
        if found is None:
            return None
        attempts = await self._many_as(conn, "run_attempts", Attempt, {"id": execution_id})
        return RunHistory(found, tuple(attempts))

    async def failed_attempts(self, conn: Conn, limit: int) -> list[FailedAttempt]:
        return await self._many_as(conn, "failed_attempts", FailedAttempt, {"limit": limit})
