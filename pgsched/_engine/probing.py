"""The tick's view of the database: the probe (which jobs have work, the database's clock),
read at the start of each tick and read again within a tick that has outlived it, so a
replica walking many jobs skips those another replica claimed meanwhile instead of opening a
claim transaction that finds nothing. Owns the last probe and the clock it read; decides
nothing about what to claim.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import datetime

from .._jobs.spec import JobSpec
from .._records import Probe
from .._storage.statements import Conn
from .._storage.store import Store

# A probe older than this is read again before the tick's next job: a tick of hundreds of
# jobs (the entries of a beat_schedule, each a job) outlives it many times.
REPROBE_AFTER_S = 0.25


class Prober:
    """One replica's probes: the newest one, when it was read, and the database's clock."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self.clock: datetime | None = None  # the database's, at the newest probe
        self.read_at = 0.0  # monotonic time of the newest probe
        self._probe: Probe | None = None
        self._expired = False

    async def read(self, conn: Conn, jobs: Mapping[str, JobSpec]) -> Probe:
        """Read the probe of ``jobs`` now."""
        dynamic = [name for name, job in jobs.items() if job.dynamic]
        probe = await self._store.tick_probe(conn, list(jobs), dynamic, self.clock)
        self.clock, self.read_at, self._probe = probe.now, time.monotonic(), probe
        self._expired = False
        return probe

    def expire(self) -> None:
        """The next :meth:`fresh` reads the probe again."""
        self._expired = True

    async def fresh(self, conn: Conn, jobs: Mapping[str, JobSpec]) -> Probe:
        """The newest probe, read again when it is older than :data:`REPROBE_AFTER_S` or
        :meth:`expire` was called."""
        age = time.monotonic() - self.read_at
        if self._probe is None or self._expired or age >= REPROBE_AFTER_S:
            return await self.read(conn, jobs)
        return self._probe
