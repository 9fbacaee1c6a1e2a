"""The ledger's partitions and retention (docs/operations.md)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from .._records import PartitionFigures
from .._structures import Scope, Triggered
from .statements import Conn, Statements

# The partitions retention deletes rows from (the others it drops whole).
_PRUNED_WHOLE_ROWS = {False: "cron_executions_default", True: "cron_executions_legacy"}


class LedgerStatements(Statements):
    """The ledger's partitions and retention."""

    async def prune_batch(
        self, conn: Conn, older_than: timedelta, batch: int, *, legacy: bool = False
    ) -> int:
        """Delete one batch of old finished rows of the DEFAULT partition (``legacy``: of the
        legacy one); returns how many."""
        params = {"older_than": older_than, "batch": batch}
        row = await self._one(conn, "prune_batch", params, partition=_PRUNED_WHOLE_ROWS[legacy])
        return int(row["deleted"])

    async def has_legacy_partition(self, conn: Conn) -> bool:
        return bool((await self._one(conn, "has_legacy_partition"))["present"])

    async def old_partitions(self, conn: Conn, older_than: timedelta) -> list[str]:
        """The partitions whose every plan is older than ``older_than``, oldest first."""
        rows = await self._many(conn, "old_partitions", {"older_than": older_than})
        return [str(r["name"]) for r in rows]

    async def drop_partition(self, conn: Conn, name: str) -> int | None:
        """Drop a partition with no unfinished row; returns its rows, None when kept."""
        dropped = int((await self._one(conn, "drop_partition", {"name": name}))["dropped"])
        return None if dropped < 0 else dropped

    async def scheduled_row(
        self, conn: Conn, job: str, scope: Scope, plan: datetime
    ) -> Triggered | None:
        """The scheduled execution of ``job``'s plan at ``plan`` for ``scope``, if any."""
        params = {"job": job, "kind": scope.kind, "id": scope.id, "plan": plan}
        return await self._opt_as(conn, "scheduled_row", Triggered, params)

    async def ensure_partitions(self, conn: Conn, times: Sequence[datetime]) -> int:
        """Create the partitions these plan times lack (before a backfill or trigger)."""
        if not times:
            return 0
        return int((await self._one(conn, "ensure_partitions", {"times": list(times)}))["made"])

    async def partition_figures(
        self, conn: Conn, first_plan: datetime, last_plan: datetime
    ) -> list[PartitionFigures]:
        """The partitions holding plans from ``first_plan`` to ``last_plan``, with whether the
        planner has figures for their rows."""
        params = {"schema": self.schema, "first_plan": first_plan, "last_plan": last_plan}
        return await self._many_as(conn, "partition_figures", PartitionFigures, params)

    async def analyze_partition(self, conn: Conn, name: str) -> None:
        """Analyze one partition (skipped by the server unless this role owns it)."""
        await self._exec(conn, "analyze_partition", partition=name)

    async def partitions_ahead(self, conn: Conn) -> int:
        """Create the partitions from yesterday's to ``ahead`` past now that are missing."""
        return int((await self._one(conn, "partitions_ahead"))["made"])
