"""The three database gauges of the README's metrics (``pgsched_running_stale``,
``pgsched_failed_runs``, ``pgsched_last_success_timestamp_seconds``) as a Prometheus collector
on the scheduler's registry, so they are current whenever that registry is scraped: pgsched's
own ``/metrics`` or the application's. Owns the cached job summary; reads the database only
through the ``fetch`` coroutine a running replica attaches, at most once per ``ttl``, on the
replica's own loop (a scrape never waits for the database, nor blocks a loop).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .._structures import JobStatus

Fetch = Callable[[], Awaitable[Sequence[JobStatus]]]
CACHE_TTL_S = 2.0

_FAMILIES = (
    ("pgsched_running_stale", "RUNNING rows past stale_after, from the database."),
    ("pgsched_failed_runs", "FAILED rows with no retry left, from the database."),
    (
        "pgsched_last_success_timestamp_seconds",
        "Finish time of the job's newest successful plan, from the database.",
    ),
)


class ClusterGauges(Collector):
    """Cluster-wide gauges from one cached job summary (every replica exports the same
    values: aggregate them with ``max by (job)``)."""

    def __init__(self, registry: CollectorRegistry, ttl_s: float = CACHE_TTL_S) -> None:
        self._ttl_s = ttl_s
        self._summary: list[JobStatus] = []
        self._read_at = float("-inf")
        self._source: tuple[Fetch, asyncio.AbstractEventLoop] | None = None
        self._on_error: Callable[[Exception], None] = lambda exc: None
        self._pending: concurrent.futures.Future[None] | None = None
        self.reads = self.errors = 0
        registry.register(self)

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return [GaugeMetricFamily(name, doc, labels=["job"]) for name, doc in _FAMILIES]

    def collect(self) -> Iterator[GaugeMetricFamily]:
        self._refresh_soon()
        running_stale, failed_runs, last_success = (
            GaugeMetricFamily(name, doc, labels=["job"]) for name, doc in _FAMILIES
        )
        for row in self._summary:
            running_stale.add_metric([row.job], row.stale)
            failed_runs.add_metric([row.job], row.failed)
            if row.last_success is not None:
                last_success.add_metric([row.job], row.last_success.timestamp())
        yield from (running_stale, failed_runs, last_success)

    def set(self, summary: Iterable[JobStatus]) -> None:
        """Replace the cached summary (read now)."""
        self._summary, self._read_at = list(summary), time.monotonic()

    def attach(
        self,
        fetch: Fetch,
        loop: asyncio.AbstractEventLoop,
        on_error: Callable[[Exception], None],
    ) -> None:
        """Read the summary with ``fetch`` on ``loop`` (a running replica's); a failed read
        goes to ``on_error``."""
        self._source, self._on_error = (fetch, loop), on_error

    def detach(self) -> None:
        self._source, self._pending = None, None

    async def refresh(self) -> None:
        """Read the summary now unless it is younger than the TTL (on the attached loop)."""
        if self._source is None or time.monotonic() - self._read_at < self._ttl_s:
            return
        fetch, _ = self._source
        self.reads += 1
        try:
            self.set(await fetch())
        except Exception as exc:  # the gauges keep their last values; a later scrape retries
            self.errors += 1
            self._read_at = time.monotonic() - self._ttl_s / 2  # no query storm meanwhile
            self._on_error(exc)

    def _refresh_soon(self) -> None:
        """From a scrape, on any thread: start a refresh on the replica's loop if due."""
        source = self._source
        if source is None or time.monotonic() - self._read_at < self._ttl_s:
            return
        if self._pending is not None and not self._pending.done():
            return
        _, loop = source
        if loop.is_closed():
            return
        self._pending = asyncio.run_coroutine_threadsafe(self.refresh(), loop)
