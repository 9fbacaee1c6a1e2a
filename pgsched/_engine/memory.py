"""The write memory: what this replica wrote lately, to put back after a failover.

Each landed terminal write is kept for :data:`REMEMBER_S` (at most :data:`REMEMBER_MAX`) as
one flat tuple of plain values (ids as integers, the outcome's fields inline, no traceback):
a tuple holding only strings, numbers and datetimes leaves the garbage collector's lists,
while the same write kept as records (the row, its outcome, their UUIDs: five tracked
objects) put 250,000 objects in front of every full collection at 400 runs a second.
"""

from __future__ import annotations

import json
import time
from collections import deque
from datetime import datetime
from typing import Any
from uuid import UUID

from .._records import Finish, Restore
from .values import Lease

# An asynchronous standby lags by seconds at most in a healthy cluster; ten minutes covers a
# lagging one with room to spare.
REMEMBER_S = 600.0
REMEMBER_MAX = 50_000

# Restore's fields kept as they are, in this order after when it was written, the id and the
# token: first those of the claim (:func:`_claimed`), then its status and next retry.
_CLAIMED = (
    "job",
    "scope_kind",
    "scope_id",
    "plan_time",
    "trigger",
    "attempt",
    "max_attempts",
    "runner_id",
    "fencing_token",
    "exclusive",
    "payload_json",
    "started_at",
    "stale_timeout_s",
    "stolen",
)
_PLAIN = (*_CLAIMED, "status", "next_retry_at")
# The outcome's fields after those (its id, token, plan time and status are the row's). Not
# its traceback: a row put back carries none (the attempt history has it), and 16 KiB each
# would make 50,000 remembered failures 800 MB.
_OUTCOME = (
    "error_code",
    "error_msg",
    "rows_affected",
    "result_json",
    "duration_ms",
    "retry_delay_s",
)


class WriteMemory:
    """The landed terminal writes of the last :data:`REMEMBER_S`, oldest first."""

    def __init__(self) -> None:
        self._writes: deque[tuple[Any, ...]] = deque()  # see _packed

    def remember(self, lease: Lease, stored: Finish, next_retry_at: datetime | None) -> None:
        if lease.job.transactional:
            return  # see rows()
        now = time.monotonic()
        self._writes.append(_packed(now, lease, stored, next_retry_at))
        cutoff = now - REMEMBER_S
        while self._writes and (self._writes[0][0] < cutoff or len(self._writes) > REMEMBER_MAX):
            self._writes.popleft()

    def rows(self, held: list[Lease]) -> list[Restore]:
        """The recent writes and the claims of the leases ``held``, one row per execution
        (its latest write). Never a transactional job's: its effect and its rows commit or
        vanish together, so a plan the new server lacks is run again, not marked done; and a
        later plan's row put back would hide the lost ones from every_plan catch-up, which
        resumes after a scope's latest plan."""
        cutoff = time.monotonic() - REMEMBER_S
        latest = {row.id: row for row in (_unpacked(p) for p in self._writes if p[0] >= cutoff)}
        for lease in held:
            if not lease.job.transactional:
                latest.setdefault(lease.execution_id, claim_row(lease))
        return list(latest.values())


def claim_row(
    lease: Lease, stored: Finish | None = None, next_retry_at: datetime | None = None
) -> Restore:
    """``lease``'s execution as claimed (RUNNING, under this replica's lease), or as
    ``stored`` once its terminal write landed."""
    run = lease.run
    return Restore(
        id=run.execution_id,
        token=run.lease_token,
        **dict(zip(_CLAIMED, _claimed(lease), strict=True)),
        status="RUNNING" if stored is None else stored.status,
        outcome=stored,
        next_retry_at=next_retry_at,
    )


def _claimed(lease: Lease) -> tuple[Any, ...]:
    """The ``_CLAIMED`` fields of ``lease``'s row, in order."""
    run, job = lease.run, lease.job
    return (
        run.job,
        run.scope.kind,
        run.scope.id,
        run.plan_time,
        run.trigger,
        run.attempt,
        run.max_attempts,
        run.runner_id,
        run.fencing_token,
        job.overlap == "forbid",
        json.dumps(run.payload) if run.payload else "{}",
        lease.started_at,
        job.stale_timeout.total_seconds(),
        lease.stolen,
    )


def _packed(
    at: float, lease: Lease, stored: Finish, next_retry_at: datetime | None
) -> tuple[Any, ...]:
    """``claim_row(lease, stored, next_retry_at)`` as :func:`_unpacked` reads it back: when,
    the id and token as integers, then the ``_PLAIN`` and ``_OUTCOME`` fields in order
    (built here field by field: a ``Restore`` first costs as much as the rest of a run's
    bookkeeping)."""
    run = lease.run
    return (
        at,
        run.execution_id.int,
        run.lease_token.int,
        *_claimed(lease),
        stored.status,
        next_retry_at,
        stored.error_code,
        stored.error_msg,
        stored.rows_affected,
        stored.result_json,
        stored.duration_ms,
        stored.retry_delay_s,
    )


def _unpacked(packed: tuple[Any, ...]) -> Restore:
    execution_id, token = UUID(int=packed[1]), UUID(int=packed[2])
    plain = dict(zip(_PLAIN, packed[3 : 3 + len(_PLAIN)], strict=True))
    outcome = packed[3 + len(_PLAIN) :]
    stored = Finish(execution_id, token, plain["plan_time"], plain["status"], *outcome)
    return Restore(id=execution_id, token=token, outcome=stored, **plain)
