"""Embedding in an asyncio application (docs/embedding.md): ``serve()`` and ``AsyncAdmin`` on
the application's loop never stall it, and the database gauges are in the application's own
registry whenever it is scraped."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime
from typing import Any

import prometheus_client
from prometheus_client import CollectorRegistry

import pgsched
from tests.support.rows import insert_row
from tests.support.threads import running
from tests.support.waiting import wait_until


class _SlowCallbacks(logging.Handler):
    """The loop's own reports of a callback that blocked it (debug mode)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.found: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Executing") and " took " in message:
            self.found.append(message)


async def _watch_loop(stop: asyncio.Event, gaps: list[float]) -> None:
    """Tick every 10 ms and record how late each tick came back."""
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(0.01)
        gaps.append(time.perf_counter() - before - 0.01)


def test_serve_and_async_admin_never_stall_the_loop(
    make_scheduler: Any, migrated: str, runtime_dsn: str
) -> None:
    """A coroutine ticking every 10 ms is never more than 50 ms late while the replica
    serves on the same loop and 100 operator actions run through ``AsyncAdmin``."""
    done: list[pgsched.Run] = []
    s = make_scheduler("embedded", tick_interval=0.2)

    @s.job(every="1s", scopes=[pgsched.Scope("t", str(i)) for i in range(20)])
    async def tick(run: pgsched.Run) -> None:
        done.append(run)

    async def app() -> list[float]:
        asyncio.get_running_loop().slow_callback_duration = 0.1
        stop, gaps = asyncio.Event(), []
        watcher = asyncio.create_task(_watch_loop(stop, gaps))
        server = asyncio.create_task(s.serve())
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            async with asyncio.timeout(30):  # a deadline: a failure, not a hang
                while "tick" not in [job.job for job in await admin.status()]:
                    await asyncio.sleep(0.05)  # the replica's first tick registers the job
            for i in range(20):  # 100 operations
                await admin.status()
                await admin.runs(limit=50)
                triggered = await admin.trigger("tick", pgsched.Scope("manual", str(i)))
                await admin.pause("tick")
                await admin.resume("tick")
                assert triggered
        started = time.monotonic()
        async with asyncio.timeout(60):  # a deadline: a failure, not a hang
            while len(done) < 40 or time.monotonic() - started < 1.5:  # several ticks, runs
                await asyncio.sleep(0.05)
        s.stop()
        await asyncio.wait_for(server, 30)
        stop.set()
        await watcher
        return gaps

    # asyncio's debug mode times every callback the loop runs and logs those over
    # slow_callback_duration (100 ms): what blocking the loop means, measured on the callback.
    # (The watcher's worst gap also counts the process waiting for a core, which a loaded
    # machine stretches to tens of milliseconds with nothing blocking the loop.)
    slow = _SlowCallbacks()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(slow)
    try:
        gaps = asyncio.run(app(), debug=True)
    finally:
        asyncio_log.removeHandler(slow)
    assert len(gaps) > 50
    # Guard against an order-of-magnitude regression (a blocking call on the loop: a sync
    # query or connect; callbacks normally take well under a millisecond), not a performance
    # claim: those live in bench/.
    assert slow.found == [], slow.found
    assert len(done) >= 40


def test_database_gauges_are_collected_from_the_applications_registry(
    make_scheduler: Any, migrated: str, db: Any
) -> None:
    """The application scrapes the registry it gave the scheduler (not pgsched's /metrics):
    the gauges read the database then, and many scrapes a second make one read per TTL."""
    registry = CollectorRegistry()
    s = make_scheduler("gauges", registry=registry, tick_interval=0.2)
    s.register(lambda run: None, name="audited", every="1d")
    insert_row(
        db,
        migrated,
        job_name="audited",
        scope_kind="t",
        scope_id="x",
        plan_time=datetime(2026, 1, 1, tzinfo=UTC),
        status="FAILED",
        attempt=1,
        max_attempts=1,
        runner_id="gone",
    )

    def failed_gauge() -> float | None:
        return registry.get_sample_value("pgsched_failed_runs", {"job": "audited"})

    with running(s):
        assert wait_until(failed_gauge, 15, "pgsched_failed_runs from a scrape") == 1.0
        reads = s.metrics.cluster.reads
        started = time.monotonic()
        scrapes = 0
        while time.monotonic() - started < 1.0:
            prometheus_client.generate_latest(registry)  # as an application's /metrics does
            scrapes += 1
        # guard against an order-of-magnitude regression (a cached scrape takes well under
        # 20 ms), not a performance claim: those live in bench/
        assert scrapes > 50
        assert s.metrics.cluster.reads - reads <= 1, "the collector queried on every scrape"
