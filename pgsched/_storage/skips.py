"""The skipped plans' statements (migration 0019): the spans a claim records in its
transaction, their retention, and the reads of ``explain``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from .._records import Row, Skip
from .._structures import SkippedSpan, trusted_scope
from .statements import Conn, Statements


class SkipStore(Statements):
    """Statements of the skipped spans (``record_skips``, ``prune_skips``, ``explain_*``)."""

    async def record_skips(self, conn: Conn, job: str, skips: Sequence[Skip]) -> None:
        """Record (or extend) the spans of one claim, in its transaction: one statement."""
        params: dict[str, Any] = {
            "job": job,
            "kinds": [s.kind for s in skips],
            "ids": [s.id for s in skips],
            "reasons": [s.reason for s in skips],
            "firsts": [s.first for s in skips],
            "lasts": [s.last for s in skips],
            "counts": [s.plans for s in skips],
            "previous": [s.previous for s in skips],
        }
        await self._exec(conn, "record_skips", params)

    async def prune_skips(self, conn: Conn, older_than: timedelta, batch: int) -> int:
        """Delete one batch of spans whose last plan is older than ``older_than``."""
        row = await self._one(conn, "prune_skips", {"older_than": older_than, "batch": batch})
        return int(row["deleted"])

    async def explain_job(self, conn: Conn, job: str) -> Row | None:
        """What explain reads of a job: its recorded schedule, pause, live replicas, clock."""
        return await self._opt(conn, "explain_job", {"job": job})

    async def explain_scope(self, conn: Conn, job: str, kind: str, ident: str) -> Row | None:
        """The scope's cursor (a dynamic job's: its schedule), None when it has none."""
        return await self._opt(conn, "explain_scope", {"job": job, "kind": kind, "id": ident})

    async def explain_runs(
        self, conn: Conn, job: str, scope: tuple[str, str], window: tuple[datetime, datetime]
    ) -> list[Row]:
        """The scope's rows with plans in ``[since, until]``, oldest plan first."""
        params = _window(job, scope, window)
        return await self._many(conn, "explain_runs", params)

    async def explain_spans(
        self, conn: Conn, job: str, scope: tuple[str, str], window: tuple[datetime, datetime]
    ) -> list[Row]:
        """The scope's skipped spans that meet ``[since, until]``, oldest first."""
        return await self._many(conn, "explain_spans", _window(job, scope, window))

    async def explain_job_spans(
        self, conn: Conn, job: str, first: datetime, last: datetime
    ) -> list[Row]:
        """A whole job's spans meeting ``[first, last]``: how many scopes had each."""
        params = {"job": job, "first": first, "last": last}
        return await self._many(conn, "explain_job_spans", params)

    async def explain_plans(self, conn: Conn, job: str, plans: Sequence[datetime]) -> list[Row]:
        """Per plan of a whole job: its rows by status."""
        params = {"job": job, "plans": list(plans), "first": min(plans), "last": max(plans)}
        async with conn.transaction():
            await self._exec(conn, "no_jit")  # counts over thousands of rows: no compiling
            return await self._many(conn, "explain_plans", params)

    async def latest_spans(self, conn: Conn, job: str, limit: int) -> list[SkippedSpan]:
        """The job's spans with the latest last plans, newest first."""
        rows = await self._many(conn, "latest_skips", {"job": job, "limit": limit})
        return [
            SkippedSpan(
                trusted_scope(r["scope_kind"], r["scope_id"]),
                r["reason"],
                r["first_plan"],
                r["last_plan"],
                r["plans"],
            )
            for r in rows
        ]

    async def grid_skips(
        self, conn: Conn, job: str, scopes: Sequence[tuple[str, str]], plans: Sequence[datetime]
    ) -> list[Row]:
        """The reason each of these scopes skipped each of these plans, where one did."""
        params = {
            "job": job,
            "kinds": [k for k, _ in scopes],
            "ids": [i for _, i in scopes],
            "plans": list(plans),
        }
        return await self._many(conn, "grid_skips", params)


def _window(job: str, scope: tuple[str, str], window: tuple[datetime, datetime]) -> dict[str, Any]:
    return {
        "job": job,
        "kind": scope[0],
        "id": scope[1],
        "since": window[0],
        "until": window[1],
    }
