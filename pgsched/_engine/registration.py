"""A replica's registration: the jobs it runs (job_state) and its own row (replicas), both
written by one statement when the jobs change and every renewal interval (10 s unless
configured), and the row removed on a clean stop. Each write says how long the row shows the
replica live: :data:`LIVE_RENEWALS` renewal intervals, which every reader of the live
replicas (the dashboard, ``pgsched replicas``, ``forget``, the API) goes by. Decides nothing
about what runs."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from .._errors import describe_error
from .._jobs.spec import JobSpec, scopes_mode
from .._planning.recurrence import recurrence_record
from .._records import JobEntry, ReplicaEntry
from .._storage.connection import pooled
from .._storage.statements import Conn
from .._storage.store import Store
from .._version import installed_version
from .recorder import Recorder
from .settings import ReplicaSettings

# A replica is live while its row was renewed within this many renewal intervals: one late
# renewal (a slow tick) does not make it gone; one that died is gone within 30 s by default.
LIVE_RENEWALS = 3
# Each registration records the plans of this window ahead (at most _MOST_UPCOMING), so the
# next plan operators see stays right until the next registration.
_UPCOMING_WINDOW = timedelta(seconds=30)
_MOST_UPCOMING = 200  # a 100 ms cadence's 20 s: past the next registration
# How often a replica makes sure the ledger has its partitions ahead (a probe of the
# partition list when they exist): the first registration, then every 10 minutes.
_PARTITIONS_EVERY = 600.0


class Registration:
    """Keeps this replica's jobs and row fresh in the database."""

    def __init__(
        self,
        store: Store,
        pool: AsyncConnectionPool[Any],
        recorder: Recorder,
        settings: ReplicaSettings,
    ) -> None:
        self._store, self._pool, self._recorder = store, pool, recorder
        self._runner_id, self._expiry = settings.runner_id, settings.replica_expiry
        self.every = min(settings.replica_renewal.total_seconds(), self._expiry.total_seconds() / 3)
        # Registrations ride on ticks: a tick slower than the interval renews at its pace.
        tick = settings.tick_interval.total_seconds()
        self.live_for = timedelta(seconds=LIVE_RENEWALS * max(self.every, tick))
        self._registered: list[JobEntry] = []
        self._registered_at = 0.0
        # Each job's entry, kept while its spec is the same object (a tick compares them all).
        self._entries: dict[str, tuple[JobSpec, JobEntry]] = {}
        self._partitioned_at: float | None = None
        self._started_at = datetime.now(UTC)
        self.http_address: str | None = None  # set by the replica once its HTTP listens

    async def register(self, conn: Conn, jobs: Mapping[str, JobSpec], now: datetime) -> None:
        """Record the jobs (with their plans after the database's ``now``) and the row when
        the jobs changed or the last time is a renewal interval old."""
        entries = sorted(self._entry_of(name, spec) for name, spec in jobs.items())
        clock = time.monotonic()
        if entries == self._registered and clock - self._registered_at < self.every:
            return
        upcoming = [upcoming_plans(jobs[entry.name], now) for entry in entries]
        await self._store.register_jobs(conn, entries, upcoming, self._entry())
        self._registered, self._registered_at = entries, clock
        if self._partitioned_at is None or clock - self._partitioned_at >= _PARTITIONS_EVERY:
            await self._partitions_ahead(conn)
            self._partitioned_at = clock

    @property
    def registered(self) -> bool:
        """Whether this replica has registered once."""
        return bool(self._registered_at)

    def _entry_of(self, name: str, job: JobSpec) -> JobEntry:
        held = self._entries.get(name)
        if held is None or held[0] is not job:
            held = self._entries[name] = (job, job_entry(name, job))
        return held[1]

    async def _partitions_ahead(self, conn: Conn) -> None:
        """Create the ledger's partitions ahead; a failure (a lock not had in time) is
        logged and tried again at the next turn: rows meanwhile go to the DEFAULT one."""
        try:
            made = await self._store.partitions_ahead(conn)
        except psycopg.Error as exc:
            self._recorder.log.warning("partitions_ahead_error", error=describe_error(exc))
            return
        if made:
            self._recorder.log.info("partitions_created", partitions=made)

    def _entry(self) -> ReplicaEntry:
        return ReplicaEntry(
            runner_id=self._runner_id,
            host=socket.gethostname(),
            version=installed_version(),
            http_address=self.http_address,
            started_at=self._started_at,
            expiry=self._expiry,
            live_for=self.live_for,
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


def job_entry(name: str, job: JobSpec) -> JobEntry:
    """``job`` as this replica records it in job_state."""
    record = recurrence_record(job.recurrence)
    return JobEntry(
        name,
        job.recurrence.describe(),
        scopes_mode(job),
        None if record is None else json.dumps(record, sort_keys=True),
        job.max_attempts,
    )


def upcoming_plans(job: JobSpec, now: datetime) -> list[datetime]:
    """The plans of ``job`` after ``now`` within the next 30 s, and always the first two
    (none for a dynamic job, whose schedules have their own): a job planned less often than
    that still has a next plan on record once its first one is claimed, until the next
    registration. A planner hook that fails here only leaves the next plan unknown; the
    claim reports its error."""
    if job.dynamic:
        return []
    try:
        plans = job.recurrence.upcoming(now, 2)
        if len(plans) == 2 and plans[1] - plans[0] < _UPCOMING_WINDOW:
            step = max((plans[1] - plans[0]).total_seconds(), 1e-3)
            wanted = min(_MOST_UPCOMING, int(_UPCOMING_WINDOW.total_seconds() / step) + 2)
            plans = job.recurrence.upcoming(now, wanted)
    except Exception:
        return []
    horizon = now + _UPCOMING_WINDOW
    return plans[:2] + [p for p in plans[2:] if p <= horizon]
