"""Embedding in an asyncio application (docs/embedding.md): ``serve()`` and ``AsyncAdmin`` on
the application's loop never stall it, and the database gauges are in the application's own
registry whenever it is scraped."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import prometheus_client
import psycopg
import pytest
from prometheus_client import CollectorRegistry

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import insert_row
from tests.support.threads import running
from tests.support.waiting import wait_until


class _CallbackCpu:
    """The CPU time of the longest callback the loop's thread ran: what a callback that
    computes too long costs, which a loaded machine does not stretch (the wall-clock time of
    asyncio's debug mode counts the process waiting for a core too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loop_thread: int | None = None
        self.worst = 0.0
        self.worst_callback = ""  # which one, so a failure says where to look
        original = asyncio.Handle._run

        def timed(handle: asyncio.Handle) -> None:
            if threading.get_ident() != self.loop_thread:
                return original(handle)
            before = time.thread_time()
            try:
                return original(handle)
            finally:
                took = time.thread_time() - before
                if took > self.worst:
                    self.worst, self.worst_callback = took, repr(handle)[:300]

        monkeypatch.setattr(asyncio.Handle, "_run", timed)


@contextlib.contextmanager
def _heap_frozen() -> Iterator[None]:
    """Leave the objects earlier tests left in this worker out of the collector's passes: a
    full collection walks the whole heap, 0.15-0.4 s here after a few hundred tests, and
    comes due inside whichever callback allocates then. Objects made during the test are
    still collected, in the callbacks that make them."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _BlockingCalls:
    """Calls that block their thread (a sync connection made or used, a sleep), recorded when
    made on the loop's thread: found by the call, so a loaded machine cannot fake one."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.loop_thread: int | None = None
        self.found: list[str] = []
        for owner, name in [
            (psycopg.Connection, "__init__"),
            (psycopg.Connection, "execute"),
            (psycopg.Cursor, "execute"),
            (time, "sleep"),
        ]:
            self._watch(monkeypatch, owner, name)

    def _watch(self, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str) -> None:
        original = getattr(owner, name)

        def watched(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == self.loop_thread:
                self.found.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)


async def _watch_loop(stop: asyncio.Event, gaps: list[float]) -> None:
    """Tick every 10 ms and record how late each tick came back."""
    while not stop.is_set():
        before = time.perf_counter()
        await asyncio.sleep(0.01)
        gaps.append(time.perf_counter() - before - 0.01)


def test_serve_and_async_admin_never_stall_the_loop(
    make_scheduler: SchedulerFactory,
    migrated: str,
    runtime_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A coroutine ticking every 10 ms is never more than 50 ms late while the replica
    serves on the same loop and 100 operator actions run through ``AsyncAdmin``."""
    done: list[pgsched.Run] = []
    s = make_scheduler("embedded", tick_interval=0.2)

    @s.job(every="1s", scopes=[pgsched.Scope("t", str(i)) for i in range(20)])
    async def tick(run: pgsched.Run) -> None:
        done.append(run)

    blocking = _BlockingCalls(monkeypatch)
    cpu = _CallbackCpu(monkeypatch)

    async def app() -> list[float]:
        blocking.loop_thread = threading.get_ident()
        cpu.loop_thread = threading.get_ident()
        stop, gaps = asyncio.Event(), list[float]()
        watcher = asyncio.create_task(_watch_loop(stop, gaps))
        server = asyncio.create_task(s.serve())
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            async with asyncio.timeout(30):  # a deadline: a failure, not a hang
                while len({r.scope for r in await _runs_of(admin, "tick")}) < 20:
                    # an operator without the APP may trigger the scopes replicas planned
                    await asyncio.sleep(0.05)
            for i in range(20):  # 100 operations
                await admin.status()
                await admin.runs(limit=50)
                triggered = await admin.trigger("tick", pgsched.Scope("t", str(i)))
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

    with _heap_frozen():
        gaps = asyncio.run(app())
    assert len(gaps) > 50
    assert blocking.found == [], blocking.found
    # Guard against an order-of-magnitude regression (callbacks normally take well under a
    # millisecond of CPU), not a performance claim: those live in bench/.
    assert cpu.worst < 0.25, f"a callback computed for {cpu.worst:.3f} s: {cpu.worst_callback}"
    assert len(done) >= 40


def test_database_gauges_are_collected_from_the_applications_registry(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
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


async def _runs_of(admin: pgsched.AsyncAdmin, job: str) -> list[pgsched.Execution]:
    """``job``'s runs, none while no record names it yet (before its replica registers)."""
    try:
        return await admin.runs(job, limit=100)
    except pgsched.NotFoundError:
        return []
