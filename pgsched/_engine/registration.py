"""A replica's registration: the jobs it runs (job_state) and its own row (replicas), both
written by one statement when the jobs change and every 10 s, and the row removed on a clean
stop. Decides nothing about what runs."""

from __future__ import annotations

import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from .._config import JobSpec
from .._records import ReplicaEntry
from .._results import describe_error
from .._storage.connection import pooled
from .._storage.store import Conn, Store
from .._version import installed_version
from .recorder import Recorder

# At most one registration statement per this many seconds on an idle tick; a short expiry
# (tests) refreshes at least three times within it.
_REGISTER_EVERY = 10.0


class Registration:
    """Keeps this replica's jobs and row fresh in the database."""

    def __init__(
        self,
        store: Store,
        pool: AsyncConnectionPool[Any],
        recorder: Recorder,
        runner_id: str,
        expiry: timedelta,
    ) -> None:
        self._store, self._pool, self._recorder = store, pool, recorder
        self._runner_id, self._expiry = runner_id, expiry
        self._every = min(_REGISTER_EVERY, self._expiry.total_seconds() / 3)
        self._registered: list[tuple[str, str]] = []
        self._registered_at = 0.0
        self._started_at = datetime.now(UTC)
        self.http_address: str | None = None  # set by the replica once its HTTP listens

    async def register(self, conn: Conn, jobs: Mapping[str, JobSpec]) -> None:
        """Record the jobs and the row when the jobs changed or the last time is 10 s old."""
        entries = sorted((name, spec.schedule.describe()) for name, spec in jobs.items())
        now = time.monotonic()
        if entries == self._registered and now - self._registered_at < self._every:
            return
        await self._store.register_jobs(conn, entries, self._entry())
        self._registered, self._registered_at = entries, now

    def _entry(self) -> ReplicaEntry:
        return ReplicaEntry(
            runner_id=self._runner_id,
            host=socket.gethostname(),
            version=installed_version(),
            http_address=self.http_address,
            started_at=self._started_at,
            expiry=self._expiry,
        )

    async def unregister(self) -> None:
        """Remove this replica's row on a clean stop (after a failure it expires instead)."""
        if not self._registered_at:
            return
        try:
            async with pooled(self._pool) as conn:
                await self._store.unregister_replica(conn, self._runner_id)
        except Exception as exc:
            self._recorder.log.warning("unregister_error", error=describe_error(exc))
