"""The claim transactions of one replica, whichever claimer runs them (one job's, or the
joint claim of several): each opened with its timeouts (and, for a synchronous replica, a
commit that waits for a standby), and ended the one way: a commit recorded per job, a
rollback (a lock missed, a cursor moved elsewhere) left for a later claim, counted and
logged. Owns no state between calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta

import psycopg

from .._storage.claims import ClaimStore
from .._storage.skips import SkipStore
from .._storage.statements import Conn
from .recorder import Recorder
from .values import Claimed, Unmoved

# The server ends a claim transaction left idle this long (a replica cut off mid-claim),
# releasing the rows it inserted. Its statements take milliseconds, but between two of them
# the replica's event loop runs whatever else is ready - a thousand handlers just started by
# the previous claim, on a busy machine - so the gap is the loop's latency: seconds under
# load (1 s ended healthy claims). Half of health_timeout's default.
CLAIM_IDLE_TIMEOUT = timedelta(seconds=10)
# Another replica's claim of the same keys waits at most this long for such a transaction
# (its insert waits for the other's rows to commit or vanish); then it gives up for this
# tick, well inside the engine's answer_timeout.
CLAIM_LOCK_TIMEOUT = timedelta(seconds=2)


class ClaimTransactions:
    """The claim transactions of the replica ``runner``, and the statements they run."""

    def __init__(
        self,
        schema: str,
        runner: str,
        recorder: Recorder,
        *,
        synchronous: bool = False,
        lookback: timedelta = timedelta(seconds=1),
    ) -> None:
        self.runner, self.recorder = runner, recorder
        self.lookback = lookback  # the tick interval: first sight counts a plan this old
        self.claims = ClaimStore(schema)
        self.skips = SkipStore(schema)
        # Every claim (new rows, steals, retries, PENDING take-overs, due cursors) is in the
        # one transaction claim_begin opens: with this, it waits for a synchronous standby.
        self._synchronous = synchronous

    @asynccontextmanager
    async def begin(self, conn: Conn) -> AsyncIterator[None]:
        """One claim transaction on ``conn``, with its timeouts."""
        async with conn.transaction():
            await self.claims.claim_begin(
                conn, CLAIM_IDLE_TIMEOUT, CLAIM_LOCK_TIMEOUT, synchronous=self._synchronous
            )
            yield

    async def ended(
        self, jobs: Sequence[str], claiming: Awaitable[dict[str, Claimed]], *, joint: bool
    ) -> dict[str, Claimed]:
        """What the transaction ``claiming`` took for each of ``jobs``, each job's commit
        recorded; rolled back, a take per job that leaves its plans for a later claim."""
        try:
            claimed_by_job = await claiming
        except psycopg.errors.LockNotAvailable:  # rolled back: the plans wait for a tick
            for name in jobs:
                self.recorder.claim_blocked(name, CLAIM_LOCK_TIMEOUT.total_seconds())
            return {name: Claimed(backlog=True) for name in jobs}
        except Unmoved as exc:  # rolled back: the next claim reads them again
            which = {"jobs": list(jobs)} if joint else {"job": jobs[0]}
            self.recorder.log.warning("claim_rolled_back", **which, unmoved=exc.args[0])
            return {name: Claimed(backlog=True) for name in jobs}
        for name, claimed in claimed_by_job.items():
            self.recorder.committed(name, claimed)
        return claimed_by_job
