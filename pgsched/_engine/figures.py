"""The planner's figures for the ledger's partitions: the first claim of a replica into a
partition that holds rows the planner has no figures for (a partition made ahead, on its
first day; the first plans of a new database) has it analyzed, so the claims after it check
each scope for a RUNNING row through the index of RUNNING rows rather than by reading every
row of the job. As the partition fills, it is analyzed again whenever it has four times the
pages its figures were taken on: that also makes the server plan again the statements each
connection planned once on the old figures (the tick's probe, psycopg's prepared statements),
which otherwise read the whole day's rows at every tick until autovacuum analyzed it.
Remembers the partitions it has seen with figures and how many rows it has claimed into each
since, so most claims cost no statement; runs no claim of its own.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from datetime import datetime, timedelta

from .._storage.statements import Conn
from .._storage.store import Store
from .values import Claim

# Partitions remembered (a day each by default): the current ones and a few before.
_REMEMBERED = 16
_INSTANT = timedelta(microseconds=1)
# A remembered partition is looked up again once this replica has claimed as many rows into
# it as the planner's figures counted, and at least this many: a handful of lookups a day.
LOOK_AGAIN_AFTER = 1_000


class _Known:
    """A span of plan times whose partition has figures, and the rows claimed into it since."""

    __slots__ = ("claimed", "hi", "lo", "look_again_at")

    def __init__(self, lo: datetime, hi: datetime, rows: int) -> None:
        self.lo, self.hi = lo, hi
        self.claimed = 0
        self.look_again_at = max(LOOK_AGAIN_AFTER, rows)


class LedgerFigures:
    """The partitions (as plan-time spans) that this replica knows have the planner's figures."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._known: deque[_Known] = deque(maxlen=_REMEMBERED)

    async def after_claim(self, conn: Conn, claims: Sequence[Claim]) -> None:
        """After a claim committed ``claims``: analyze the partitions its new rows went to
        that hold rows but no figures, or have outgrown theirs."""
        plans = [c.plan_time for c in claims if c.kind == "won"]
        if not plans:
            return
        first, last = min(plans), max(plans)
        known = next((k for k in self._known if k.lo <= first and last < k.hi), None)
        if known is not None:
            known.claimed += len(plans)
            if known.claimed < known.look_again_at:
                return
            self._known.remove(known)
        parts = await self._store.partition_figures(conn, first, last)
        if not parts:  # the DEFAULT partition's plans: autovacuum's to analyze
            self._known.append(_Known(first, last + _INSTANT, rows=0))
        for part in parts:
            if part.unanalyzed or part.outgrown:
                await self._store.analyze_partition(conn, part.name)
            if not part.empty:  # analyzed now, or already had its figures
                self._known.append(_Known(part.lo, part.hi, part.rows))
