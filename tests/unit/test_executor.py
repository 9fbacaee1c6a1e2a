"""The executor (``pgsched._engine.execution``): each claimed lease's handler in a task of its own
(sync handlers in a thread), bounded by ``run_timeout``, its return or exception turned into
an :class:`Outcome` for the writer; leases lost, abandoned at shutdown, or chained under
``overlap="forbid"``; and transactional runs that the database failed, run again under the
same lease."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

import pgsched
from pgsched._engine import execution as _execution
from pgsched._engine.execution import Executor
from pgsched._engine.leases import LeaseTable
from pgsched._engine.recorder import Recorder
from pgsched._engine.transaction import TransactionUnavailable, Written
from pgsched._engine.values import Lease, Outcome
from pgsched._jobs.spec import JobSpec
from pgsched._run import Run
from pgsched._storage.connection import Backoff
from tests.unit.engine_fakes import PLAN, idle, job, lease, recorder, sample, table


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """A transactional rerun waits for the database a thousand times sooner than in
    production: what is tested is what it does once the row can be read."""

    class Quick(Backoff):
        def __init__(self) -> None:
            super().__init__(first=0.0005, cap=0.005)

    monkeypatch.setattr(_execution, "Backoff", Quick)


@dataclass
class FakeTransactions:
    """Transactional runs without a database: the handler runs, then the scripted
    ``failures`` (one per attempt, None: it commits) decide what its transaction did;
    ``status`` is what reading the row afterwards finds."""

    failures: list[TransactionUnavailable | None] = field(default_factory=list)
    status: str | None = "RUNNING"
    calls: int = 0

    async def run_async(
        self,
        spec: JobSpec,
        arg: Run,
        runs: Sequence[Run],
        outcomes: Callable[[object], list[Outcome]],
    ) -> list[Written] | None:
        self.calls += 1
        value = await spec.handler(arg)
        failure = self.failures.pop(0) if self.failures else None
        if failure is not None:
            raise failure
        return [(done, None) for done in outcomes(value)]

    async def lease_statuses(self, runs: Sequence[Run]) -> list[str | None]:
        return [self.status for _ in runs]


@dataclass
class Rig:
    leases: LeaseTable
    rec: Recorder
    executor: Executor
    submitted: list[tuple[Lease, Outcome]]

    def start(self, spec: JobSpec, **claim: Any) -> Lease:
        """Hold a lease of ``spec`` and start its handler."""
        one = lease(spec, **claim)
        self.leases.hold([one])
        self.executor.start([one], traced=False)
        return one

    def outcome(self, one: Lease) -> Outcome:
        (found,) = [outcome for held, outcome in self.submitted if held is one]
        return found


def rig(transactions: FakeTransactions | None = None) -> Rig:
    rec = recorder()
    leases, _ = table(rec=rec)
    submitted: list[tuple[Lease, Outcome]] = []

    def submit(outcomes: list[tuple[Lease, Outcome]]) -> None:  # the writer: written at once
        submitted.extend(outcomes)
        for one, _ in outcomes:
            leases.release(one)

    executor = Executor(leases, rec, transactions or FakeTransactions(), submit)  # type: ignore[arg-type]
    return Rig(leases, rec, executor, submitted)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))


def test_an_async_handlers_result_is_a_success_with_its_rows_and_data() -> None:
    r = rig()

    async def handler(run: pgsched.Run) -> pgsched.Result:
        return pgsched.Result(rows_affected=3, data={"tenant": run.scope.id})

    async def scenario() -> None:
        one = r.start(job(handler), scope=pgsched.Scope("tenant", "acme"))
        await idle(r.leases)
        outcome = r.outcome(one)
        assert (outcome.status, outcome.rows_affected) == ("SUCCESS", 3)
        assert outcome.result_json == '{"tenant": "acme"}'
        assert outcome.duration_ms >= 0

    run(scenario)


def test_a_sync_handler_runs_in_a_thread_of_its_own() -> None:
    r = rig()
    threads: list[str] = []

    def handler(run: pgsched.Run) -> int:
        threads.append(threading.current_thread().name)
        return 7

    async def scenario() -> None:
        one = r.start(job(handler))
        await idle(r.leases)
        assert r.outcome(one).rows_affected == 7

    run(scenario)
    assert threads == ["pgsched:job"]


def test_an_exception_is_a_failure_retried_after_the_backoff() -> None:
    r = rig()

    def handler(run: pgsched.Run) -> None:
        raise ValueError("upstream said no")

    spec = job(handler, max_attempts=3, retry_backoff=["1m", "5m"])

    async def scenario() -> None:
        first = r.start(spec, attempt=1, max_attempts=3)
        second = r.start(spec, attempt=2, max_attempts=3, scope=pgsched.Scope("s", "2"))
        last = r.start(spec, attempt=3, max_attempts=3, scope=pgsched.Scope("s", "3"))
        await idle(r.leases)
        outcome = r.outcome(first)
        assert (outcome.status, outcome.error_code) == ("FAILED", "handler_error")
        assert outcome.error_msg is not None and "ValueError: upstream said no" in outcome.error_msg
        assert outcome.retry_delay_s == 60
        assert r.outcome(second).retry_delay_s == 300
        assert r.outcome(last).retry_delay_s is None, "no attempt left"

    run(scenario)


def test_run_timeout_fails_the_run_and_cancels_an_async_handler() -> None:
    r = rig()
    cancelled = asyncio.Event()

    async def handler(run: pgsched.Run) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    spec = job(handler, run_timeout=0.1, stale_timeout=5, heartbeat_interval=1)

    async def scenario() -> None:
        one = r.start(spec)
        await idle(r.leases)
        outcome = r.outcome(one)
        assert (outcome.status, outcome.error_code) == ("FAILED", "run_timeout")
        assert outcome.error_msg is not None and "run_timeout" in outcome.error_msg
        assert cancelled.is_set()

    run(scenario)


def test_run_timeout_abandons_a_sync_handler_and_discards_its_late_result() -> None:
    r = rig()
    release = threading.Event()

    def handler(run: pgsched.Run) -> int:
        release.wait(10)
        return 1

    spec = job(handler, run_timeout=0.1, stale_timeout=5, heartbeat_interval=1)

    async def scenario() -> None:
        one = r.start(spec)
        await idle(r.leases)
        release.set()
        await asyncio.sleep(0.05)  # the thread returns: its value lands nowhere
        assert [outcome.error_code for _, outcome in r.submitted] == ["run_timeout"]
        assert r.outcome(one).status == "FAILED"

    run(scenario)


def test_a_timeout_the_handler_raises_itself_is_a_handler_error() -> None:
    r = rig()

    async def handler(run: pgsched.Run) -> None:
        raise TimeoutError("the upstream API timed out")

    async def scenario() -> None:
        one = r.start(job(handler))
        await idle(r.leases)
        assert r.outcome(one).error_code == "handler_error"

    run(scenario)


def test_a_value_that_cannot_be_stored_is_invalid_result() -> None:
    r = rig()

    async def scenario() -> None:
        one = r.start(job(lambda run: "not a Result"))
        await idle(r.leases)
        assert (r.outcome(one).status, r.outcome(one).error_code) == ("FAILED", "invalid_result")

    run(scenario)


def test_system_exit_in_a_sync_handler_fails_the_run_not_the_replica() -> None:
    r = rig()

    def handler(run: pgsched.Run) -> None:
        raise SystemExit(3)

    async def scenario() -> None:
        one = r.start(job(handler))
        await idle(r.leases)
        outcome = r.outcome(one)
        assert (outcome.status, outcome.error_code) == ("FAILED", "handler_error")
        assert outcome.error_msg is not None and "handler raised SystemExit" in outcome.error_msg

    run(scenario)


def test_lease_lost_raised_by_the_handler_writes_nothing_and_is_counted_once() -> None:
    r = rig()

    def handler(run: pgsched.Run) -> None:
        raise pgsched.LeaseLost("gone")

    async def scenario() -> None:
        r.start(job(handler))
        await idle(r.leases)

    run(scenario)
    assert r.submitted == []
    assert r.rec.report.leases_lost == 1
    assert sample(r.rec, "pgsched_leases_lost_total", job="job") == 1


def test_an_outcome_of_a_lease_lost_meanwhile_is_not_written() -> None:
    r = rig()
    started = asyncio.Event()
    finish = asyncio.Event()

    async def handler(run: pgsched.Run) -> int:
        started.set()
        await finish.wait()
        return 1

    async def scenario() -> None:
        one = r.start(job(handler))
        await started.wait()
        r.leases.lose(one, "heartbeat matched no row", release=False)  # as the writer does
        finish.set()
        await idle(r.leases)

    run(scenario)
    assert r.submitted == []
    assert r.rec.report.leases_lost == 1, "found lost twice, counted once"


def test_abandoning_at_shutdown_cancels_the_handler_and_asks_for_a_retry_at_once() -> None:
    r = rig()
    started = asyncio.Event()

    async def handler(run: pgsched.Run) -> int:
        started.set()
        await asyncio.sleep(60)
        return 1

    spec = job(handler, max_attempts=2, retry_backoff=["1h"])

    async def scenario() -> None:
        one = r.start(spec, max_attempts=2)
        await started.wait()
        r.executor.abandon(one, "shutdown_grace passed")
        await idle(r.leases)
        assert one.task is not None
        await asyncio.gather(one.task, return_exceptions=True)
        assert one.task.cancelled() or one.task.done()

    run(scenario)
    ((_, outcome),) = r.submitted
    assert (outcome.status, outcome.error_code, outcome.retry_delay_s) == (
        "FAILED",
        "shutdown",
        0.0,
    )


def test_a_later_plan_of_a_scope_starts_once_the_earlier_one_is_done() -> None:
    r = rig()
    order: list[str] = []
    release_first = asyncio.Event()

    async def handler(run: pgsched.Run) -> int:
        order.append(f"start {run.plan_time.minute}")
        if run.plan_time == PLAN:
            await release_first.wait()
        order.append(f"end {run.plan_time.minute}")
        return 1

    spec = job(handler, overlap="forbid")

    async def scenario() -> None:
        r.start(spec, plan=PLAN)
        r.start(spec, plan=PLAN.replace(minute=1))
        await asyncio.sleep(0.05)
        assert order == ["start 0"], "the later plan waits for the earlier one"
        release_first.set()
        await idle(r.leases)

    run(scenario)
    assert order == ["start 0", "end 0", "start 1", "end 1"]


def test_a_later_plan_whose_lease_was_lost_while_waiting_never_runs() -> None:
    r = rig()
    ran: list[int] = []
    release_first = asyncio.Event()

    async def handler(run: pgsched.Run) -> int:
        ran.append(run.plan_time.minute)
        if run.plan_time == PLAN:
            await release_first.wait()
        return 1

    spec = job(handler, overlap="forbid")

    async def scenario() -> None:
        r.start(spec, plan=PLAN)
        later = r.start(spec, plan=PLAN.replace(minute=1))
        r.leases.lose(later, "heartbeat matched no row", release=False)
        release_first.set()
        await idle(r.leases)

    run(scenario)
    assert ran == [0]
    assert len(r.submitted) == 1 and r.rec.report.leases_lost == 1


def _transactional(handler_calls: list[int]) -> JobSpec:
    async def handler(run: pgsched.Run) -> int:
        handler_calls.append(run.attempt)
        return 1

    return job(handler, transactional=True, max_attempts=1)


def _cut(outcome: Outcome | None = None) -> TransactionUnavailable:
    committing = None if outcome is None else [outcome]
    return TransactionUnavailable(psycopg.OperationalError("connection lost"), committing)


def test_a_transactional_run_the_database_failed_runs_again_under_the_same_lease() -> None:
    calls: list[int] = []
    transactions = FakeTransactions(failures=[_cut(), _cut()])
    r = rig(transactions)

    async def scenario() -> None:
        r.start(_transactional(calls))
        await idle(r.leases)

    run(scenario)
    assert calls == [1, 1, 1], "the same attempt each time: max_attempts=1 loses no plan"
    assert r.submitted == [], "it wrote its SUCCESS row itself"
    assert r.rec.report.succeeded == 1


def test_a_transactional_commit_that_landed_before_the_cut_is_recorded_not_run_again() -> None:
    calls: list[int] = []
    committed = Outcome("SUCCESS", 5, rows_affected=1)
    transactions = FakeTransactions(failures=[_cut(committed)], status="SUCCESS")
    r = rig(transactions)

    async def scenario() -> None:
        r.start(_transactional(calls))
        await idle(r.leases)

    run(scenario)
    assert calls == [1]
    assert (r.rec.report.succeeded, r.rec.report.leases_lost) == (1, 0)


@pytest.mark.parametrize("status", [None, "FAILED", "SUCCESS"])
def test_a_transactional_row_taken_over_meanwhile_loses_the_lease(status: str | None) -> None:
    calls: list[int] = []
    transactions = FakeTransactions(failures=[_cut()], status=status)
    r = rig(transactions)

    async def scenario() -> None:
        r.start(_transactional(calls))
        await idle(r.leases)

    run(scenario)
    assert calls == [1], "someone else's row (or nothing committed of ours): never run again"
    assert (r.rec.report.succeeded, r.rec.report.leases_lost) == (0, 1)


def test_a_handler_start_is_timed_from_its_plans_due_time() -> None:
    r = rig()

    async def scenario() -> None:
        spec = job(lambda run: 1)
        r.start(spec, started_at=PLAN.replace(second=2))
        await idle(r.leases)

    run(scenario)
    assert sample(r.rec, "pgsched_start_lag_seconds_count", job="job") == 1
    lag = sample(r.rec, "pgsched_start_lag_seconds_sum", job="job")
    assert 2.0 <= lag < 2.5, "claimed 2 s after its plan, started at once"


class _FakeCoreWait:
    """Stands in for the thread's schedstat reading: ``waits`` seconds are added to the
    reading, and a read can itself take ``read_wait`` (a preempted thread: the time passes
    on the clock too, as a wait for a core does)."""

    def __init__(self, read_wait: float = 0.0) -> None:
        self.total, self.read_wait = 0.0, read_wait

    def recent(self, now: float) -> float:
        return self.total

    def seconds(self) -> float:
        if self.read_wait:
            time.sleep(self.read_wait)
            self.total += self.read_wait
        return self.total


def _timed_step(
    monkeypatch: pytest.MonkeyPatch, core: _FakeCoreWait, body: Any
) -> list[tuple[float, float, float]]:
    """The long steps of a handler running ``body`` (step, core wait, collector)."""
    monkeypatch.setattr(_execution, "LOOP_BLOCKED_S", 0.05)  # a short step counts as long
    monkeypatch.setattr(_execution._CoreWait._local, "core_wait", core, raising=False)
    steps: list[tuple[float, float, float]] = []

    async def handler() -> None:
        body()

    async def timed() -> None:
        await _execution._StepTimed(
            handler(), lease(job()), lambda _, step, wait, gc_s: steps.append((step, wait, gc_s))
        )

    asyncio.run(timed())
    return steps


def test_a_step_is_its_time_less_the_core_wait_inside_it(monkeypatch: pytest.MonkeyPatch) -> None:
    core = _FakeCoreWait()

    def body() -> None:  # 0.3 s of wall time, 0.2 s of it waiting for a core
        time.sleep(0.3)
        core.total += 0.2

    [(step, core_wait, _)] = _timed_step(monkeypatch, core, body)
    assert 0.09 <= step < 0.2 and core_wait == 0.2, (step, core_wait)


def test_a_core_wait_after_the_step_is_not_taken_off_it(monkeypatch: pytest.MonkeyPatch) -> None:
    # The thread is preempted for 0.5 s after the step ended, while its wait is read: the
    # step blocked the loop for 0.2 s and is reported so (it was reported as -0.3 s, so a
    # blocking handler on a loaded machine went unnamed).
    [(step, _, _)] = _timed_step(monkeypatch, _FakeCoreWait(read_wait=0.5), lambda: time.sleep(0.2))
    assert 0.2 <= step < 0.45, step


def test_a_collection_inside_a_step_is_not_the_handlers(monkeypatch: pytest.MonkeyPatch) -> None:
    # A full collection while a fan-out held 100,000 runs took 0.2-0.5 s (more on a loaded
    # machine) and was reported as the handler that happened to be running blocking the loop.
    # Here a step spends 0.25 s or more inside a collection, as the collector reports it; the
    # step's own time is measured around it, since a loaded machine stretches both sleeps.
    collector = _execution._CollectorTime.of_process()
    walls: list[float] = []

    def body() -> None:
        began = time.monotonic()
        time.sleep(0.05)
        collector._observe("start", {})
        time.sleep(0.25)
        collector._observe("stop", {})
        walls.append(time.monotonic() - began)

    [(step, _, gc_s)] = _timed_step(monkeypatch, _FakeCoreWait(), body)
    [wall] = walls
    # Blamed for the wall time less the collector's: without it, 0.3 s or more.
    assert gc_s >= 0.25 and step <= wall - gc_s + 0.05, (step, gc_s, wall)


def test_the_collector_time_counts_real_collections() -> None:
    collector = _execution._CollectorTime.of_process()
    before = collector.seconds
    garbage = [[i] for i in range(200_000)]  # something for a full collection to traverse
    gc.collect()
    del garbage
    assert collector.seconds > before
