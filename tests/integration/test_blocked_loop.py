"""An async handler that blocks the event loop (finding: ``time.sleep(12)`` in an ``async``
handler reported SUCCESS after 12 s despite ``run_timeout=3s``, with no warning naming it):
the block is logged with its job and execution and counted, and the run is FAILED
``run_timeout`` when it overran, saying it blocked the loop."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from structlog.testing import capture_logs

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import rows

BLOCK_S = 1.5  # past LOOP_BLOCKED_S (1 s) and past the run_timeout below


def test_an_async_handler_blocking_past_run_timeout_is_failed_and_named(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()

    @s.job(every="1d", run_timeout="1s", stale_timeout="30s")
    async def blocker(run: pgsched.Run) -> int:
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - the bug under test: blocking in an async handler
        return 1

    with capture_logs() as events:
        report = s.run_once()
    assert report.failed == 1 and report.succeeded == 0
    (row,) = rows(db, migrated)
    assert (row["status"], row["error_code"]) == ("FAILED", "run_timeout")
    assert "blocked the event loop" in row["error_msg"]
    blocked = [e for e in events if e["event"] == "event_loop_blocked"]
    assert len(blocked) == 1, events
    assert blocked[0]["job"] == "blocker"
    assert blocked[0]["execution_id"] == str(row["id"])
    assert blocked[0]["blocked_s"] >= BLOCK_S
    sample = s.metrics.registry.get_sample_value(
        "pgsched_event_loop_blocked_total", {"job": "blocker"}
    )
    assert sample == 1


def test_an_async_handler_blocking_within_run_timeout_succeeds_but_is_named(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()

    @s.job(every="1d", run_timeout="30s")
    async def slow_step(run: pgsched.Run) -> int:
        await asyncio.sleep(0)
        time.sleep(BLOCK_S)  # noqa: ASYNC251 - the bug under test
        await asyncio.sleep(0)
        return 1

    with capture_logs() as events:
        report = s.run_once()
    assert report.succeeded == 1
    assert [e["job"] for e in events if e["event"] == "event_loop_blocked"] == ["slow_step"]


def test_an_async_handler_that_awaits_is_not_reported(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()

    @s.job(every="1d", run_timeout="30s")
    async def polite(run: pgsched.Run) -> int:
        await asyncio.sleep(BLOCK_S)  # waits without holding the loop
        return 1

    with capture_logs() as events:
        report = s.run_once()
    assert report.succeeded == 1
    assert not [e for e in events if e["event"] == "event_loop_blocked"]
