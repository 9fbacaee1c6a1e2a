"""The planner's figures for the ledger's partitions: the first claim of a replica into a
partition that holds rows the planner has no figures for (a partition made ahead, on its
first day; the first plans of a new database) has it analyzed, so the claims after it check
each scope for a RUNNING row through the index of RUNNING rows rather than by reading every
row of the job. Remembers the partitions it has seen with figures (or analyzed), so a claim
into them costs no statement; runs no claim of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta

from .._storage.store import Conn, Store
from .values import Claim

# Partitions remembered (a day each by default): the current ones and a few before.
_REMEMBERED = 16
_INSTANT = timedelta(microseconds=1)


class LedgerFigures:
    """The partitions (as plan-time spans) that this replica knows have the planner's figures."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._known: deque[tuple[datetime, datetime]] = deque(maxlen=_REMEMBERED)

    async def after_claim(self, conn: Conn, claims: Sequence[Claim]) -> None:
        """After a claim committed ``claims``: analyze the partitions its new rows went to
        that hold rows but no figures (at most once per partition, by this replica)."""
        plans = [c.plan_time for c in claims if c.kind == "won"]
        if not plans:
            return
        first, last = min(plans), max(plans)
        if any(lo <= first and last < hi for lo, hi in self._known):
            return
        parts = await self._store.partition_figures(conn, first, last)
        if not parts:  # the DEFAULT partition's plans: autovacuum's to analyze
            self._known.append((first, last + _INSTANT))
        for part in parts:
            if part.unanalyzed:
                await self._store.analyze_partition(conn, part.name)
            if not part.empty:  # analyzed now, or already had its figures
                self._known.append((part.lo, part.hi))
