"""Failure and recovery hooks on a real PostgreSQL: ``on_failure(run, error)`` for every failed
attempt (the handler's exception, or the error that ended it), ``on_recovery(run)`` for the
first success after a failure of the same (job, scope), the job's and the Scheduler's both,
sync or async; a hook that raises is logged and changes nothing."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

import pgsched
from pgsched._storage.store import Store
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import rows, seed_running
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


class Calls:
    """What the hooks were called with, from any thread."""

    def __init__(self) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self._lock = threading.Lock()

    def add(self, *entry: Any) -> None:
        with self._lock:
            self.seen.append(entry)

    def names(self) -> list[str]:
        return [e[0] for e in self.seen]


def test_every_failed_attempt_then_the_recovery_across_plans(
    make_scheduler: SchedulerFactory, db: Any, migrated: str
) -> None:
    calls = Calls()
    s = make_scheduler("r1")
    outcomes = iter([ValueError("first"), KeyError("second"), None, None])

    def handler(run: pgsched.Run) -> None:
        error = next(outcomes)
        if error is not None:
            raise error

    s.register(
        handler,
        name="flaky",
        planner=FixedPlans(past_plan(db)),
        max_attempts=2,
        retry_backoff=[],
        on_failure=lambda run, error: calls.add("failure", run.attempt, error),
        on_recovery=lambda run: calls.add("recovery", run.attempt, run.trigger),
    )
    assert s.run_once().failed == 1
    assert s.run_once().failed == 1  # the retry, at once; no attempt left
    (first, second) = calls.seen
    assert first[:2] == ("failure", 1) and type(first[2]) is ValueError
    assert str(first[2]) == "first"
    assert second[:2] == ("failure", 2) and type(second[2]) is KeyError

    s.admin.trigger("flaky")  # the next plan of the scope succeeds: a recovery
    assert s.run_once().succeeded == 1
    assert calls.seen[2:] == [("recovery", 1, "manual")]
    s.admin.trigger("flaky")  # a success after a success: nothing
    assert s.run_once().succeeded == 1
    assert len(calls.seen) == 3


def test_a_retry_that_succeeds_is_a_recovery_and_async_hooks_are_awaited(
    db: Any, make_scheduler: SchedulerFactory, migrated: str
) -> None:
    calls = Calls()

    async def on_failure(run: pgsched.Run, error: BaseException) -> None:
        await asyncio.sleep(0)
        calls.add("scheduler failure", run.attempt, type(error).__name__)

    async def on_recovery(run: pgsched.Run) -> None:
        calls.add("scheduler recovery", run.attempt)

    s = make_scheduler("r1", on_failure=on_failure, on_recovery=on_recovery)

    @s.job(
        planner=FixedPlans(past_plan(db)),
        max_attempts=3,
        retry_backoff=[],
        on_failure=lambda run, error: calls.add("job failure", run.attempt, type(error).__name__),
    )
    def lucky(run: pgsched.Run) -> int:
        if run.attempt < 3:
            raise ValueError(f"attempt {run.attempt}")
        return 1

    for _ in range(3):
        assert s.run_once().started == 1
    assert sorted(calls.seen) == [
        ("job failure", 1, "ValueError"),
        ("job failure", 2, "ValueError"),
        ("scheduler failure", 1, "ValueError"),
        ("scheduler failure", 2, "ValueError"),
        ("scheduler recovery", 3),
    ]


def test_a_run_timeout_reaches_on_failure_as_a_timeout(
    db: Any, make_scheduler: SchedulerFactory, migrated: str
) -> None:
    errors: list[BaseException] = []
    s = make_scheduler("r1")

    @s.job(
        planner=FixedPlans(past_plan(db)),
        run_timeout="1s",
        on_failure=lambda run, error: errors.append(error),
    )
    async def slow(run: pgsched.Run) -> None:
        await asyncio.sleep(30)

    assert s.run_once().failed == 1
    (error,) = errors
    assert isinstance(error, pgsched.RunTimeout) and isinstance(error, pgsched.PgschedError)
    assert isinstance(error, TimeoutError) and "run_timeout" in str(error)


def test_a_hook_that_raises_is_logged_and_the_run_stays_a_success(
    db: Any, make_scheduler: SchedulerFactory, migrated: str
) -> None:
    def broken_hook(run: pgsched.Run) -> None:
        raise RuntimeError("the hook is broken")

    calls = Calls()
    s = make_scheduler(
        "r1", on_failure=lambda run, error: calls.add("failure"), on_recovery=broken_hook
    )

    @s.job(planner=FixedPlans(past_plan(db)), max_attempts=2, retry_backoff=[])
    def flaky(run: pgsched.Run) -> None:
        if run.attempt == 1:
            raise ValueError("once")

    with capture_logs() as events:
        s.run_once()
        assert s.run_once().succeeded == 1
    (row,) = rows(db, migrated)
    assert row["status"] == "SUCCESS"
    failed = [e for e in events if e["event"] == "hook_failed"]
    assert len(failed) == 1, events
    assert failed[0]["hook"].endswith("broken_hook")
    assert failed[0]["job"] == "flaky" and failed[0]["execution_id"] == str(row["id"])
    assert "the hook is broken" in failed[0]["error"]
    assert calls.names() == ["failure"]


def test_a_stale_lease_closed_here_calls_on_failure(
    db: Any, make_scheduler: SchedulerFactory, migrated: str
) -> None:
    errors: list[tuple[pgsched.Run, BaseException]] = []
    s = make_scheduler("closer", on_failure=lambda run, error: errors.append((run, error)))
    plan = past_plan(db, timedelta(hours=2))
    s.register(lambda run: None, name="crashy", every="1d", allow_stale_reentry=False)
    stale = seed_running(db, migrated, "crashy", plan, stale_in=timedelta(seconds=-5))
    s.run_once()
    (run, error) = next((r, e) for r, e in errors if r.execution_id == stale["id"])
    assert isinstance(error, pgsched.StaleLease) and "went stale" in str(error)
    assert (run.job, run.runner_id, run.plan_time) == ("crashy", "old-runner", plan)


def test_no_lookup_without_a_recovery_hook(
    db: Any, make_scheduler: SchedulerFactory, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The previous plan's status is read only for jobs with a recovery hook."""
    looked_up: list[int] = []
    real = Store.previous_outcomes

    async def counted(self: Store, conn: Any, keys: Any) -> dict[int, str]:
        looked_up.append(len(keys))
        return await real(self, conn, keys)

    monkeypatch.setattr(Store, "previous_outcomes", counted)
    plan = past_plan(db)
    plain = make_scheduler("r1")
    plain.register(lambda run: None, name="plain", planner=FixedPlans(plan))
    assert plain.run_once().succeeded == 1
    assert looked_up == []

    hooked = make_scheduler("r2")
    hooked.register(lambda run: None, name="hooked", planner=FixedPlans(plan), on_recovery=print)
    assert hooked.run_once().succeeded == 1
    assert looked_up == [1]


def test_a_slow_hook_delays_no_other_runs_terminal_write(
    db: Any, make_scheduler: SchedulerFactory, migrated: str
) -> None:
    """A failure hook still blocked; meanwhile another run of the replica lands SUCCESS."""
    release, entered = threading.Event(), threading.Event()

    def slow_hook(run: pgsched.Run, error: BaseException) -> None:
        entered.set()
        release.wait(30)

    s = make_scheduler("r1", tick_interval="0.2s", on_failure=slow_hook)
    plan = past_plan(db)

    def broken(run: pgsched.Run) -> None:
        raise ValueError("broken")

    s.register(broken, name="broken", planner=FixedPlans(plan))
    s.register(lambda run: None, name="later", planner=FixedPlans())  # triggered only

    def later_status() -> str | None:
        found = [r["status"] for r in rows(db, migrated, "later")]
        return found[0] if found == ["SUCCESS"] else None

    async def scenario() -> None:
        server = asyncio.create_task(s.serve())
        try:
            await asyncio.to_thread(entered.wait, 30)
            assert entered.is_set(), "the failure hook was never called"
            await asyncio.to_thread(s.admin.trigger, "later")
            await asyncio.to_thread(wait_until, later_status, 30, "later's SUCCESS")
            assert not release.is_set()  # the hook is still running
        finally:
            release.set()
            s.stop()
            await asyncio.wait_for(server, 30)

    asyncio.run(scenario())


def test_a_run_abandoned_at_shutdown_reaches_on_failure(
    db: Any, make_scheduler: SchedulerFactory, migrated: str
) -> None:
    errors: list[BaseException] = []
    s = make_scheduler("r1", shutdown_grace=0, on_failure=lambda run, e: errors.append(e))
    started = asyncio.Event()

    @s.job(planner=FixedPlans(past_plan(db)), max_attempts=2)
    async def endless(run: pgsched.Run) -> None:
        started.set()
        await asyncio.sleep(60)

    async def scenario() -> None:
        server = asyncio.create_task(s.serve())
        await asyncio.wait_for(started.wait(), 30)
        s.stop()
        await asyncio.wait_for(server, 30)  # the hooks drained before serve() returns

    asyncio.run(scenario())
    (error,) = errors
    assert isinstance(error, pgsched.RunAbandoned) and error.error_code == "shutdown"
    (row,) = rows(db, migrated)
    assert (row["status"], row["error_code"]) == ("FAILED", "shutdown")
