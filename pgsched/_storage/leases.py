"""The leases' statements: heartbeats, terminal writes (async, and on a sync handler's
transactional connection), a lease's status, the rows put back after a failover, and the
outcomes before a plan that the recovery hooks read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from .._records import Finish, Renewal, Restore, Row
from .._structures import Scope
from .statements import Conn, Statements, column, naming, plan_span


class LeaseStatements(Statements):
    """Statements on the rows this replica holds leases of."""

    async def heartbeat(self, conn: Conn, leases: Sequence[Renewal]) -> set[UUID]:
        """Renew the leases; returns the ids still held."""
        return {ident for (ident,) in await self._plain(conn, "heartbeat", _renewal_params(leases))}

    async def finish(self, conn: Conn, rows: Sequence[Finish]) -> dict[UUID, datetime | None]:
        """Write terminal rows; returns ``{id: next_retry_at}`` for the writes that held."""
        return dict(await self._plain(conn, "finish", _finish_params(rows)))

    def finish_sync(
        self, conn: psycopg.Connection[Any], rows: Sequence[Finish]
    ) -> dict[UUID, datetime | None]:
        """:meth:`finish` on a sync connection (a sync handler's transactional ``run.conn``)."""
        with conn.cursor(row_factory=dict_row) as cur, naming("finish"):
            cur.execute(self.statement("finish"), _finish_params(rows))
            return {r["id"]: r["next_retry_at"] for r in cur.fetchall()}

    async def lease_status(
        self, conn: Conn, execution_id: UUID, token: UUID, plan_time: datetime
    ) -> str | None:
        """The execution's status while ``token`` holds its lease, else None."""
        params = {"id": execution_id, "token": token, "plan": plan_time}
        row = await self._opt(conn, "lease_status", params)
        return None if row is None else str(row["status"])

    async def reapply(self, conn: Conn, rows: Sequence[Restore]) -> Row:
        """Put ``rows`` back where the server lacks them (``brought``: rows found in an
        earlier state; ``restored``: rows inserted)."""
        return await self._one(conn, "reapply", _restore_params(rows))

    async def previous_outcomes(
        self, conn: Conn, keys: Sequence[tuple[str, Scope, datetime]]
    ) -> dict[int, str]:
        """For each (job, scope, plan) of ``keys``, by position: the status (SUCCESS or
        FAILED) of the scope's latest finished plan before it; absent when there is none."""
        params = {
            "jobs": [k[0] for k in keys],
            "kinds": [k[1].kind for k in keys],
            "ids": [k[1].id for k in keys],
            "plans": [k[2] for k in keys],
        }
        rows = await self._many(conn, "previous_outcomes", params)
        return {int(r["i"]) - 1: str(r["status"]) for r in rows}


def _restore_params(rows: Sequence[Restore]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: r.id)  # one lock order, as the finish takes
    outcomes = [r.outcome for r in ordered]
    return {
        "ids": [r.id for r in ordered],
        "jobs": [r.job for r in ordered],
        "kinds": [r.scope_kind for r in ordered],
        "scope_ids": [r.scope_id for r in ordered],
        "plans": [r.plan_time for r in ordered],
        "triggers": [r.trigger for r in ordered],
        "statuses": [r.status for r in ordered],
        "attempts": [r.attempt for r in ordered],
        "max_attempts": [r.max_attempts for r in ordered],
        "runners": [r.runner_id for r in ordered],
        "tokens": [r.token for r in ordered],
        "fencing": [r.fencing_token for r in ordered],
        "exclusive": [r.exclusive for r in ordered],
        "stolen": [r.stolen for r in ordered],
        "payloads": [r.payload_json for r in ordered],
        "started": [r.started_at for r in ordered],
        "stale_timeouts": [r.stale_timeout_s for r in ordered],
        "error_codes": [o.error_code if o else None for o in outcomes],
        "error_msgs": [o.error_msg if o else None for o in outcomes],
        "rows": [o.rows_affected if o else None for o in outcomes],
        "results": [o.result_json if o else None for o in outcomes],
        "durations": [o.duration_ms if o else None for o in outcomes],
        "retry_at": [r.next_retry_at for r in ordered],
    }


def _renewal_params(leases: Sequence[Renewal]) -> dict[str, Any]:
    ordered = sorted(leases)  # one lock order for every statement: no deadlock between them
    return {
        "ids": [lease.id for lease in ordered],
        "tokens": [lease.token for lease in ordered],
        "plans": [lease.plan_time for lease in ordered],
        "stale_timeouts": [lease.stale_timeout_s for lease in ordered],
        **plan_span(lease.plan_time for lease in ordered),
    }


def _finish_params(rows: Sequence[Finish]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda f: f.id)  # one lock order for every statement
    return {
        "ids": [f.id for f in ordered],
        "tokens": [f.token for f in ordered],
        "plans": [f.plan_time for f in ordered],
        "statuses": [f.status for f in ordered],
        "error_codes": column([f.error_code for f in ordered]),
        "error_msgs": column([f.error_msg for f in ordered]),
        "rows": column([f.rows_affected for f in ordered]),
        "results": column([f.result_json for f in ordered]),
        "durations": [f.duration_ms for f in ordered],
        "retry_delays": column([f.retry_delay_s for f in ordered]),
        "tracebacks": column([f.traceback for f in ordered]),
        **plan_span(f.plan_time for f in ordered),
    }
