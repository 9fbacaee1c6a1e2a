"""The lease writer: the terminal writes and heartbeats of the replica's leases, each one
statement for many rows, guarded by lease tokens. The two share one lock and the pool, so a
heartbeat never races a terminal write of the same rows. Owns the outbox; decides nothing
about what to run.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import Any
from uuid import UUID

from psycopg_pool import AsyncConnectionPool

from .._errors import describe_error
from .._records import Finish, Renewal, Server
from .._storage.connection import Backoff, pool_hosts, pooled, unavailable
from .._storage.statements import Conn
from .._storage.store import Store
from .leases import LeaseTable
from .memory import WriteMemory
from .recorder import Recorder
from .values import Lease, Outcome

_FINISH_ROWS = 2_000
# With other leases still running, the writer waits up to this long for more outcomes.
_FINISH_LINGER_S = 0.2
_MISSED: Any = object()  # a lease whose terminal write matched no row


class LeaseWriter:
    """Writes outcomes (:meth:`submit`) and renews leases, many a statement, until cancelled."""

    def __init__(
        self,
        *,
        store: Store,
        pool: AsyncConnectionPool[Any],
        leases: LeaseTable,
        recorder: Recorder,
        synchronous: bool = False,
    ) -> None:
        self._store, self._pool = store, pool
        # Terminal writes wait for a synchronous standby (synchronous_claims). Heartbeats do
        # not: one lost in a failover only brings the lease's expiry back by an interval (the
        # next renews it again, and the lease token guards a steal), while waiting for a
        # lagging standby would let leases go stale.
        self._synchronous = synchronous
        self._leases, self._recorder = leases, recorder
        self._hosts = pool_hosts(pool)
        # Since when (monotonic) a write has kept failing for want of a database: /healthz.
        self.failing_since: float | None = None
        # Outcomes to write, oldest first (a list and an event: an asyncio.Queue's per-item
        # bookkeeping cost as much as the rest of queueing a run's write).
        self._outbox: list[tuple[Lease, Outcome]] = []
        self._queued = asyncio.Event()
        self._lock = asyncio.Lock()
        self.memory = WriteMemory()

    def submit(self, outcomes: list[tuple[Lease, Outcome]]) -> None:
        """Queue the terminal writes of these leases (one run's, or a batch's: written in one
        statement); a slot is freed once its leases are written."""
        for lease, _ in outcomes:
            lease.submit()
        self._outbox += outcomes
        self._queued.set()

    # -- terminal writes ----------------------------------------------------------------------

    async def write_loop(self) -> None:
        while True:
            outcomes = await self._next_outcomes()
            try:
                self._settle(outcomes, *await self._write(outcomes))
            except Exception as exc:  # not the database's (that is retried): a bug of ours
                self._recorder.log.error("writer_error", error=describe_error(exc))
                for lease, _ in outcomes:  # a slot must never stay held for good
                    self._leases.release(lease)

    def _settle(
        self,
        outcomes: list[tuple[Lease, Outcome]],
        rows: list[Finish],
        written: dict[UUID, datetime | None],
    ) -> None:
        """Record and release the leases of ``outcomes``; ``rows[i]`` is the row written (or
        tried) for ``outcomes[i]``, ``written`` the ids that landed with their next retry."""
        landed: list[tuple[Lease, Outcome, datetime | None]] = []
        for (lease, outcome), row in zip(outcomes, rows, strict=True):
            retry_at = written.get(lease.execution_id, _MISSED)
            if retry_at is _MISSED:
                self._leases.lose(lease, "terminal write matched no row holding this lease")
                continue
            if row.status != outcome.status:  # the outcome could not be stored as is
                outcome = _as_stored(outcome, row)
            landed.append((lease, outcome, retry_at))
            self.memory.remember(lease, row, retry_at)
        self._recorder.finished(landed)
        for lease, _, _ in landed:
            self._leases.release(lease)

    async def _next_outcomes(self) -> list[tuple[Lease, Outcome]]:
        """The next outcome, and those that follow it closely: while other leases may still
        finish, one statement for many rows is far cheaper than many for a few (and a
        terminal write delays no start)."""
        while not self._outbox:
            self._queued.clear()
            await self._queued.wait()
        outcomes = self._take(_FINISH_ROWS)
        linger_until = time.monotonic() + _FINISH_LINGER_S
        while len(outcomes) < _FINISH_ROWS:
            if self._outbox:
                outcomes += self._take(_FINISH_ROWS - len(outcomes))
            elif len(self._leases) > len(outcomes) and time.monotonic() < linger_until:
                await asyncio.sleep(_FINISH_LINGER_S / 10)
            else:
                break
        return outcomes

    def _take(self, most: int) -> list[tuple[Lease, Outcome]]:
        """The oldest ``most`` outcomes, and the rest of a batch the last of them is in."""
        outbox = self._outbox
        if 0 < most < len(outbox):
            slot = outbox[most - 1][0].slot
            while slot is not None and most < len(outbox) and outbox[most][0].slot is slot:
                most += 1
        taken = outbox[:most]
        del outbox[:most]
        return taken

    async def _write(
        self, outcomes: list[tuple[Lease, Outcome]]
    ) -> tuple[list[Finish], dict[UUID, datetime | None]]:
        """Write ``outcomes``: the rows written (or tried), one per lease, and the ids that landed.
        While the database is unavailable it is retried (the lease tokens decide, once it is
        back, whether the rows still count); when the statement itself is refused, row by row."""
        rows = [outcome.finish(lease.run) for lease, outcome in outcomes]
        try:
            return rows, await self._finish_retrying(rows)
        except Exception as exc:  # a statement error: something in the rows is unstorable
            if len(outcomes) > 1:
                self._recorder.log.warning(
                    "writer_batch_refused", error=describe_error(exc), pending=len(outcomes)
                )
        written: dict[UUID, datetime | None] = {}
        for i, ((lease, _), row) in enumerate(zip(outcomes, rows, strict=True)):
            rows[i], landed = await self._write_one(lease, row)
            written.update(landed)
        return rows, written

    async def _write_one(
        self, lease: Lease, row: Finish
    ) -> tuple[Finish, dict[UUID, datetime | None]]:
        """One row, and the row tried last; refused, it is written as FAILED
        ``invalid_result`` without the value it could not store; refused again, it is given
        up: its slot is freed and the row, left RUNNING, is closed out or taken over by a
        replica once its lease goes stale."""
        try:
            return row, await self._finish_retrying([row])
        except Exception as exc:
            self._recorder.unstorable(lease, describe_error(exc))
            row = _unstorable(row, exc)
            try:
                return row, await self._finish_retrying([row])
            except Exception as again:
                lease.run.log.error("outcome_dropped", error=describe_error(again))
                self._leases.lose(lease, "terminal write refused twice: given up")
                return row, {}

    async def _finish_retrying(self, rows: list[Finish]) -> dict[UUID, datetime | None]:
        """:meth:`_finish`, tried again with backoff for as long as the database is
        unavailable; an error of the statement itself is raised."""
        backoff = Backoff()
        while True:
            attempted = time.monotonic()
            try:
                written = await self._finish(rows)
            except Exception as exc:
                if not unavailable(exc):
                    self.failing_since = None  # the database answered
                    raise
                if self.failing_since is None:
                    self.failing_since = attempted
                delay = backoff.delay()
                self._recorder.log.warning(
                    "writer_retry",
                    error=describe_error(exc),
                    error_class=type(exc).__name__,
                    host=self._hosts,
                    pending=len(rows),
                    attempt=backoff.failures,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)
                continue
            self.failing_since = None
            return written

    async def _finish(self, rows: list[Finish]) -> dict[UUID, datetime | None]:
        async with self._lock, pooled(self._pool) as conn:
            if not self._synchronous:
                return await self._store.finish(conn, rows)
            async with conn.transaction():  # SET LOCAL needs one (also behind PgBouncer)
                await self._store.synchronous_commit(conn)
                return await self._store.finish(conn, rows)

    # -- after a failover -----------------------------------------------------------------

    async def reapply(self, previous: Server | None, server: Server, conn: Conn) -> None:
        """Put back on ``server`` (the new one, through ``conn``) what this replica wrote to
        ``previous`` lately and the new server may lack: its recent terminal writes and the
        claims of the leases it holds. A statement error is logged, not raised: the switch to
        the new server must not wait on it."""
        if previous is None:
            return
        held = [lease for lease in self._leases.all() if not lease.submitted]
        rows = self.memory.rows(held)
        if not rows:
            return
        try:
            counts = await self._store.reapply(conn, rows)
        except Exception as exc:
            if unavailable(exc):
                raise  # the new server is gone too: the switch is tried again
            self._recorder.log.error("reapply_failed", error=describe_error(exc), rows=len(rows))
            return
        self._recorder.log.warning(
            "writes_reapplied",
            rows=len(rows),
            brought=counts["brought"],
            restored=counts["restored"],
            server=server.describe(),
        )

    # -- heartbeats ---------------------------------------------------------------------------

    async def heartbeat_loop(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            now = time.monotonic()
            due = self._leases.due_for_heartbeat(now)
            if not due:
                continue
            try:
                held = await self._renew(due)
            except Exception as exc:  # tried again at the next beat; the loop never ends
                self._recorder.log.error(
                    "heartbeat_error",
                    error=describe_error(exc),
                    error_class=type(exc).__name__,
                    host=self._hosts,
                    leases=len(due),
                )
                continue
            for lease in due:
                if lease.execution_id in held:
                    lease.liveness.renewed()
                    lease.renewed(now)
                elif not lease.submitted:  # the handler still runs; its outcome frees the slot
                    # (A submitted lease's outcome may have landed while the beat waited for
                    # the lock: no row RUNNING is then no loss; its write settles the lease.)
                    self._leases.lose(
                        lease, "heartbeat matched no row holding this lease", release=False
                    )

    async def _renew(self, due: list[Lease]) -> set[UUID]:
        leases = [
            Renewal(
                lease.execution_id,
                lease.run.lease_token,
                lease.run.plan_time,
                lease.job.stale_timeout.total_seconds(),
            )
            for lease in due
        ]
        async with self._lock, pooled(self._pool) as conn:
            return await self._store.heartbeat(conn, leases)


def _as_stored(outcome: Outcome, stored: Finish) -> Outcome:
    """``outcome`` as the row it landed as (a SUCCESS whose value was refused: FAILED
    ``invalid_result``), so logs, metrics and the tick report say what the ledger says."""
    return outcome._replace(
        status="FAILED",
        error_code=stored.error_code,
        error_msg=stored.error_msg,
        rows_affected=stored.rows_affected,
        result_json=stored.result_json,
        retry_delay_s=stored.retry_delay_s,
    )


def _unstorable(row: Finish, exc: Exception) -> Finish:
    """``row`` as a FAILED ``invalid_result`` without the value that could not be stored."""
    return row._replace(
        status="FAILED",
        error_code="invalid_result",
        rows_affected=None,
        result_json=None,
        error_msg=describe_error(exc)[:200] + " (while storing the outcome)",
    )
