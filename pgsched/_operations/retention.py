"""Retention: the operation that removes the ledger's old rows (``prune``), part of
:class:`~pgsched._operations.core.Operations`."""

from __future__ import annotations

from .._storage.skips import SkipStore
from .._storage.store import Store
from .._times import Duration, parse_duration
from .audit import Action, Audited, Entry

PRUNE_BATCH = 1000


class RetentionOperations(Audited):
    """The retention operation of :class:`~pgsched._operations.core.Operations` (which sets
    the attributes declared here)."""

    _store: Store
    _skips: SkipStore

    async def prune(self, older_than: Duration) -> int:
        """Retention; returns the rows removed. Drops each partition whose every plan is
        older than ``older_than`` and whose rows are all finished (one with an unfinished
        row is kept whole until it has none). The DEFAULT partition (and the legacy one, the
        ledger of an earlier version, until it can be dropped) has its finished rows older
        than that deleted in small batches, each scope keeping its newest scheduled plan
        unless its cursor remembers it, so a pruned scope never looks new. The spans of
        skipped plans whose last plan is older than that go with them (not counted)."""
        age = parse_duration(older_than, field="older_than", allow_zero=False)
        total = 0
        async with self._conn() as conn:
            for name in await self._store.old_partitions(conn, age):
                total += await self._store.drop_partition(conn, name) or 0
            legacy = await self._store.has_legacy_partition(conn)
            for in_legacy in (False, True) if legacy else (False,):
                while True:
                    deleted = await self._store.prune_batch(
                        conn, age, PRUNE_BATCH, legacy=in_legacy
                    )
                    total += deleted
                    if deleted < PRUNE_BATCH:
                        break
            while await self._skips.prune_skips(conn, age, PRUNE_BATCH) >= PRUNE_BATCH:
                pass
        # Its batches commit one by one (a transaction over them would hold every row's lock):
        # recorded once they are all done.
        details = {"older_than_s": age.total_seconds(), "deleted": total}
        await self._record(Entry(Action.PRUNE, details=details))
        return total
