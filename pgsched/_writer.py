"""The lease writer: batched terminal writes and heartbeats of the replica's leases, each one
statement for many rows, guarded by lease tokens. The two share one lock and the pool, so a
heartbeat never races a terminal write of the same rows. Owns the outbox; decides nothing
about what to run.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from ._leases import Lease, LeaseTable
from ._outcomes import Outcome
from ._recorder import Recorder
from ._results import describe_error
from ._store import Finish, Store

_FINISH_BATCH = 2_000
# With other leases still running, the writer waits up to this long for more outcomes.
_FINISH_LINGER_S = 0.05
# Errors that say nothing about the statement, only the connection: try again later.
TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)


class LeaseWriter:
    """Writes outcomes (:meth:`submit`) and renews leases, in batches, until cancelled."""

    def __init__(
        self,
        *,
        store: Store,
        pool: AsyncConnectionPool[Any],
        leases: LeaseTable,
        recorder: Recorder,
        retry_every_s: float,
    ) -> None:
        self._store, self._pool = store, pool
        self._leases, self._recorder = leases, recorder
        self._retry_every_s = retry_every_s
        self._outbox: asyncio.Queue[tuple[Lease, Outcome]] = asyncio.Queue()
        self._lock = asyncio.Lock()

    def submit(self, lease: Lease, outcome: Outcome) -> None:
        """Queue ``lease``'s terminal write; its slot is freed once it is written."""
        self._outbox.put_nowait((lease, outcome))

    # -- terminal writes ----------------------------------------------------------------------

    async def write_loop(self) -> None:
        while True:
            batch = await self._next_batch()
            written = await self._write(batch)
            for lease, outcome in batch:
                if lease.execution_id not in written:
                    self._leases.lose(lease, "terminal write matched no row holding this lease")
                    continue
                self._recorder.finished(lease, outcome, written[lease.execution_id])
                self._leases.release(lease)

    async def _next_batch(self) -> list[tuple[Lease, Outcome]]:
        """The next outcome, and those that follow it closely: while other leases may still
        finish, one statement for many rows is far cheaper than many for a few (and a
        terminal write delays no start)."""
        batch = [await self._outbox.get()]
        linger_until = time.monotonic() + _FINISH_LINGER_S
        while len(batch) < _FINISH_BATCH:
            if not self._outbox.empty():
                batch.append(self._outbox.get_nowait())
            elif len(self._leases) > len(batch) and time.monotonic() < linger_until:
                await asyncio.sleep(_FINISH_LINGER_S / 10)
            else:
                break
        return batch

    async def _write(self, batch: list[tuple[Lease, Outcome]]) -> dict[UUID, datetime | None]:
        """Write a batch; connection trouble is retried, a row that cannot be stored is not."""
        rows = [outcome.finish(lease.run) for lease, outcome in batch]
        while True:
            try:
                return await self._finish(rows)
            except TRANSIENT as exc:
                self._recorder.log.error(
                    "write_error", error=describe_error(exc), pending=len(batch)
                )
                await asyncio.sleep(self._retry_every_s)
            except Exception:
                break  # something in the batch itself is unstorable: find it row by row
        written: dict[UUID, datetime | None] = {}
        for (lease, _), row in zip(batch, rows, strict=True):
            try:
                written.update(await self._finish([row]))
            except TRANSIENT:
                raise
            except Exception as exc:
                self._recorder.unstorable(lease, describe_error(exc))
                written.update(await self._finish([_unstorable(row, exc)]))
        return written

    async def _finish(self, rows: list[Finish]) -> dict[UUID, datetime | None]:
        async with self._lock, self._pool.connection() as conn:
            return await self._store.finish(conn, rows)

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
            except Exception as exc:
                self._recorder.log.error(
                    "heartbeat_error", error=describe_error(exc), leases=len(due)
                )
                continue
            for lease in due:
                if lease.execution_id in held:
                    lease.liveness.renewed()
                    lease.next_beat = now + lease.job.heartbeat_interval.total_seconds()
                else:  # the handler still runs; its outcome will release the slot
                    self._leases.lose(
                        lease, "heartbeat matched no row holding this lease", release=False
                    )

    async def _renew(self, due: list[Lease]) -> set[UUID]:
        leases = [
            (lease.execution_id, lease.run.lease_token, lease.job.stale_timeout.total_seconds())
            for lease in due
        ]
        async with self._lock, self._pool.connection() as conn:
            return await self._store.heartbeat(conn, leases)


def _unstorable(row: Finish, exc: Exception) -> Finish:
    """``row`` as a FAILED ``invalid_result`` without the value that could not be stored."""
    return replace(
        row,
        status="FAILED",
        error_code="invalid_result",
        rows_affected=None,
        result_json=None,
        error_msg=describe_error(exc)[:200] + " (while storing the outcome)",
    )
