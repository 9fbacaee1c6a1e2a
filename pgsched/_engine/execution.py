"""Running handlers: the executor starts each claimed lease's handler (async on the loop, sync in
a daemon thread), bounds it by ``run_timeout``, and turns what it returned or raised into an
:class:`Outcome` for the writer. Owns the handler tasks; runs no SQL of its own (transactional
runs write through their own connection, see ``transaction``).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import os
import threading
import time
from collections.abc import Callable, Generator
from typing import Any

from .._errors import LeaseLost, describe_error
from .._run import Batch, Run
from .._storage.connection import Backoff, unavailable
from .._telemetry.tracing import UNTRACED, run_span
from .deadlines import RunDeadlines
from .leases import LeaseTable
from .outcomes import Failure, InvalidResult, ended, failed, returned
from .recorder import Recorder
from .threads import HandlerThreads
from .transaction import Transactions, TransactionUnavailable, Written
from .values import Lease, Outcome


class Executor:
    """Starts handlers and delivers their outcomes to ``submit`` (the lease writer)."""

    def __init__(
        self,
        leases: LeaseTable,
        recorder: Recorder,
        transactions: Transactions,
        submit: Callable[[list[tuple[Lease, Outcome]]], None],
    ) -> None:
        self._leases, self._recorder = leases, recorder
        self._transactions = transactions
        self._submit = submit
        self._deadlines = RunDeadlines()

    def start(self, leases: list[Lease], traced: bool) -> None:
        """Run the handler of ``leases`` in a task of their own: one run's, or a batch's
        (``batch_size``), after the scopes' previous plans held here under
        ``overlap="forbid"``; in an OpenTelemetry span if ``traced``."""
        task = asyncio.create_task(self._execute(leases, traced))
        for lease in leases:
            lease.task = task

    def abandon(self, lease: Lease, why: str) -> None:
        """Shutdown: stop waiting for ``lease``; it is FAILED ``shutdown``, retryable at once."""
        lease.abandon()
        if lease.task is not None:
            lease.task.cancel()
        self._submit(
            [(lease, failed(lease, time.monotonic(), Failure("shutdown", why), retry_now=True))]
        )

    async def _execute(self, leases: list[Lease], traced: bool) -> None:
        try:
            leases = await self._after_previous(leases)
            if not leases:
                return
            started = time.monotonic()
            for lease in leases:
                if lease.claim_lag is not None:
                    self._recorder.started(lease, lease.claim_lag + started - lease.claimed_at)
            # Only a transactional run can run again: the others await their attempt directly
            # (every await level is crossed at each step of the handler).
            head = leases[0]
            attempt = self._with_reruns if head.job.transactional else self._attempt
            with run_span(head.run, head.kind, len(leases)) if traced else UNTRACED as record:
                outcomes = await attempt(leases, started)
                record(_told(outcomes))
        except asyncio.CancelledError:
            if not all(lease.abandoned for lease in leases):
                raise
            return
        if outcomes is not None:
            self._deliver(leases, outcomes)

    async def _after_previous(self, leases: list[Lease]) -> list[Lease]:
        """``leases`` once the earlier plans of their scopes held here are done (those of
        the same batch run with it, in plan order), less those lost meanwhile."""
        waited = False
        for lease in leases:
            previous = lease.previous
            if previous is not None and previous.task is not lease.task:
                await previous.wait_done()
                waited = True
        if not waited:
            return leases
        kept = []
        for lease in leases:
            if lease.liveness.known_lost:
                self._leases.lose(lease, "lease lost while waiting for the scope's earlier plan")
            else:
                kept.append(lease)
        return kept

    async def _with_reruns(self, leases: list[Lease], started: float) -> list[Outcome] | None:
        """The handler's outcomes; None when there is nothing left to write (the leases were
        lost, or a transactional run already wrote them). A transactional run whose
        transaction the database failed runs again under the same leases, each time within
        ``run_timeout``, once the database is back and its rows show nothing committed: the
        attempt is not spent (max_attempts=1 loses no plan) and no effect is doubled."""
        while True:
            try:
                return await self._attempt(leases, started)
            except TransactionUnavailable as exc:
                if not await self._may_run_again(leases, exc):
                    return None
            for lease in leases:
                lease.run.mark = None  # the rolled-back attempt's marks are undone with it
            started = time.monotonic()

    async def _attempt(self, leases: list[Lease], started: float) -> list[Outcome] | None:
        """One attempt within ``run_timeout``: its outcomes (None for a transactional run's,
        written with its transaction, or a lost lease)."""
        head = leases[0]
        job = head.job
        arg = head.run if job.batch_size is None else Batch(job.name, [x.run for x in leases])
        self._deadlines.arm(head, job.run_timeout.total_seconds())
        try:
            if job.transactional:
                self._committed(leases, await self._transactional(leases, arg, started))
                return None
            if job.is_async:
                value = await _StepTimed(job.handler(arg), head, self._blocked)
            else:
                value = await in_thread(job.handler, arg)
        except asyncio.CancelledError:
            task = head.task
            # Another cancellation (shutdown) asked too: that one is not a timeout.
            if not (self._deadlines.disarm(head) and (task is None or not task.cancelling())):
                raise
            why = f"TimeoutError: handler ran longer than run_timeout ({job.run_timeout})"
            return ended(
                leases, started, Failure("run_timeout", why), rolled_back=job.transactional
            )
        except TransactionUnavailable:
            raise
        except LeaseLost as exc:
            if job.batch_size is not None:  # a run of the batch: the others fail with it
                return self._raised(leases, started, exc)
            self._leases.lose(head, "handler raised LeaseLost")
            return None
        except InvalidResult as exc:  # a transactional run's result, refused before commit
            failure = Failure("invalid_result", describe_error(exc))
            return ended(leases, started, failure, rolled_back=job.transactional)
        except Exception as exc:
            return self._raised(leases, started, exc)
        finally:
            self._deadlines.disarm(head)
        return self._returned(leases, started, value)

    def _raised(self, leases: list[Lease], started: float, exc: Exception) -> list[Outcome]:
        failure = Failure("handler_error", describe_error(exc), exc)
        self._recorder.handler_raised(leases, failure.message, exc)
        return ended(leases, started, failure, rolled_back=leases[0].job.transactional)

    def _returned(self, leases: list[Lease], started: float, value: Any) -> list[Outcome]:
        """The outcomes of a handler that returned ``value``."""
        job = leases[0].job
        overran = time.monotonic() - started - job.run_timeout.total_seconds()
        if overran > 0:  # it blocked the loop past its deadline: asyncio could not cancel it
            why = (
                f"TimeoutError: handler ran longer than run_timeout ({job.run_timeout}) and"
                " could not be interrupted: it blocked the event loop"
            )
            return ended(leases, started, Failure("run_timeout", why))
        try:
            return returned(leases, started, value, strict=False)
        except Exception as exc:  # InvalidResult, or anything odd a custom object raises
            return ended(leases, started, Failure("invalid_result", describe_error(exc)))

    def _blocked(self, lease: Lease, seconds: float, core_wait: float, collector: float) -> None:
        if seconds >= LOOP_BLOCKED_S:
            self._recorder.loop_blocked(lease, seconds)
        elif seconds + core_wait + collector >= LOOP_BLOCKED_S:
            self._recorder.loop_stalled(lease, seconds, core_wait, collector)

    def _deliver(self, leases: list[Lease], outcomes: list[Outcome]) -> None:
        """Queue the outcomes of ``leases`` together (a batch's in one terminal write)."""
        queued = []
        for lease, outcome in zip(leases, outcomes, strict=True):
            if lease.abandoned:
                continue  # shutdown already wrote (or is writing) this lease's outcome
            if lease.liveness.known_lost:  # a merely late renewal still tries: the token decides
                self._leases.lose(lease, "lease lost before the outcome could be written")
                continue
            queued.append((lease, outcome))
        if queued:
            self._submit(queued)

    async def _transactional(
        self, leases: list[Lease], arg: Run | Batch, started: float
    ) -> list[Written] | None:
        job = leases[0].job
        runs = [lease.run for lease in leases]
        outcomes = functools.partial(returned, leases, started, strict=True)
        if job.is_async:
            return await self._transactions.run_async(job, arg, runs, outcomes)
        sync = functools.partial(self._transactions.run_sync, job, runs=runs, outcomes=outcomes)
        result: list[Written] | None = await in_thread(sync, arg)
        return result

    async def _may_run_again(self, leases: list[Lease], exc: TransactionUnavailable) -> bool:
        """After a transactional run's database failed it: wait until its rows can be read,
        then True when they are still RUNNING under these leases (nothing committed: run
        again). Rows found ended under these leases are the cut-off COMMIT that landed:
        recorded as such, never run twice; any other rows (taken over, or gone) lose the
        leases."""
        log = leases[0].run.log if len(leases) == 1 else self._recorder.log
        log.warning(
            "transactional_unavailable",
            error=describe_error(exc.cause),
            error_class=type(exc.cause).__name__,
            commit_unknown=exc.outcomes is not None,
            runs=len(leases),
        )
        backoff = Backoff()
        while True:
            await backoff.wait()
            if any(lease.liveness.known_lost for lease in leases):
                self._lose(leases, "lease lost while the database was unavailable")
                return False
            try:
                statuses = await self._transactions.lease_statuses([x.run for x in leases])
                break
            except Exception as again:
                if not unavailable(again):  # left RUNNING: taken over once its lease is stale
                    self._lose(leases, f"its row could not be read: {again}")
                    return False
        if all(status == "RUNNING" for status in statuses):
            log.info("transactional_rerun", attempt=leases[0].run.attempt, runs=len(leases))
            return True
        if exc.outcomes is not None and all(s in ("SUCCESS", "FAILED") for s in statuses):
            self._committed(leases, [(outcome, None) for outcome in exc.outcomes])
            return False
        found = ", ".join(sorted({s or "held by another lease" for s in statuses}))
        self._lose(leases, f"the row is {found} after the run")
        return False

    def _committed(self, leases: list[Lease], written: list[Written] | None) -> None:
        if written is None:
            self._lose(leases, "terminal write matched no row holding this lease: rolled back")
            return
        self._recorder.finished(
            [
                (lease, outcome, retry_at)
                for lease, (outcome, retry_at) in zip(leases, written, strict=True)
            ]
        )
        for lease in leases:
            self._leases.release(lease)

    def _lose(self, leases: list[Lease], why: str) -> None:
        for lease in leases:
            self._leases.lose(lease, why)


def _told(outcomes: list[Outcome] | None) -> Outcome | None:
    """What a batch's span says: its first failure, else its first outcome."""
    if not outcomes:
        return None
    return next((o for o in outcomes if o.status == "FAILED"), outcomes[0])


def in_thread(fn: Callable[[Any], Any], arg: Run | Batch) -> asyncio.Future[Any]:
    """Run a sync handler (of a run, or a batch) on a daemon thread (:mod:`.threads`);
    abandoning the future abandons the thread (so a handler abandoned at ``run_timeout``
    cannot keep the process alive)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()
    context = contextvars.copy_context()

    def deliver(ok: bool, value: Any) -> None:
        if future.done():
            return  # timed out or cancelled: the late result is discarded
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def target() -> None:
        try:
            value, ok = context.run(fn, arg), True
        except Exception as exc:
            value, ok = exc, False
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: a failure of this run,
            # not of the scheduler (asyncio futures must not carry them)
            value, ok = RuntimeError(f"handler raised {type(exc).__name__}: {exc}"), False
        with contextlib.suppress(RuntimeError):  # the loop is closed: the scheduler has gone
            loop.call_soon_threadsafe(deliver, ok, value)

    _THREADS.submit(target, f"pgsched:{arg.job}")
    return future


_THREADS = HandlerThreads()


LOOP_BLOCKED_S = 1.0  # an async handler's step longer than this stalled every other job


class _CoreWait:
    """Seconds the current thread has spent runnable but waiting for a core (Linux's
    schedstat): a step's wall time less this is what the step itself took, so a loaded
    machine that leaves the loop's thread waiting for a core is not blamed on the handler
    (which a sleeping handler, off the run queue, still is). 0 where schedstat is missing.

    Reading schedstat is a system call: ``recent`` gives a reading at most ``FRESH_S`` old,
    so thousands of short steps a second cost a few reads (a step's core wait is then
    overstated by at most the wait of that moment before it began)."""

    FRESH_S = 0.05
    _local = threading.local()

    def __init__(self) -> None:
        try:
            path = f"/proc/self/task/{threading.get_native_id()}/schedstat"
            self._fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self._fd = None
        self._read_at, self._reading = -self.FRESH_S, 0.0

    @classmethod
    def of_this_thread(cls) -> _CoreWait:
        found: _CoreWait | None = getattr(cls._local, "core_wait", None)
        if found is None:
            found = cls._local.core_wait = cls()
        return found

    def recent(self, now: float) -> float:
        if now - self._read_at >= self.FRESH_S:
            self._read_at, self._reading = now, self.seconds()
        return self._reading

    def seconds(self) -> float:
        if self._fd is None:
            return 0.0
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0


class _CollectorTime:
    """Seconds this process has spent in the garbage collector, every thread's collections
    (each holds the interpreter): a step that set one off did not cause its length. A large
    fan-out keeps many objects alive, and a full collection then takes a while (0.2-0.5 s
    with 100,000 runs held, over a second on a loaded machine), which was reported as the
    handler that happened to be running blocking the loop."""

    _instance: _CollectorTime | None = None

    def __init__(self) -> None:
        self.seconds = 0.0
        self._began = 0.0
        gc.callbacks.append(self._observe)

    @classmethod
    def of_process(cls) -> _CollectorTime:
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def _observe(self, phase: str, info: dict[str, int]) -> None:
        # Collections do not nest: each "start" is followed by its "stop".
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began


class _StepTimed:
    """Awaits ``coro``, timing each of its steps (the code between two awaits, run with the
    event loop held): ``on_long_step(lease, seconds, core_wait, collector)`` after a step that
    held the loop ``LOOP_BLOCKED_S`` or more, so the handler that blocked the loop is named (a
    thread watching the loop could only say that it was blocked). Such a step is its wall time
    less ``core_wait``, the time its thread waited for a core meanwhile, and ``collector``,
    the garbage collector's time meanwhile. Short steps cost two clock reads: every run of
    every async handler goes through here."""

    __slots__ = ("_coro", "_lease", "_on_long_step")

    def __init__(
        self, coro: Any, lease: Lease, on_long_step: Callable[[Lease, float, float, float], None]
    ) -> None:
        self._coro, self._lease, self._on_long_step = coro, lease, on_long_step

    def __await__(self) -> Generator[Any, Any, Any]:
        steps = self._coro.__await__()
        send, throw, clock = steps.send, steps.throw, time.monotonic
        sent: Any = None
        thrown: BaseException | None = None
        core, collector = _CoreWait.of_this_thread(), _CollectorTime.of_process()
        while True:
            began = clock()
            waited, collected = core.recent(began), collector.seconds
            try:
                try:
                    pending = send(sent) if thrown is None else throw(thrown)
                finally:  # inline, not a call: every step of every run comes here
                    if clock() - began >= LOOP_BLOCKED_S:
                        self._long_step(began, waited, core, collector.seconds - collected)
            except StopIteration as done:
                return done.value
            thrown = None
            try:
                sent = yield pending
            except BaseException as exc:  # a cancellation (run_timeout, shutdown) goes in
                sent, thrown = None, exc

    def _long_step(self, began: float, waited: float, core: _CoreWait, collected: float) -> None:
        # The clock is read again after the core wait: a wait for a core between the two
        # reads (a loaded machine preempting the thread) is then in both terms, not
        # subtracted from a step that never included it.
        core_waited = core.seconds() - waited
        took = time.monotonic() - began - core_waited - collected
        self._on_long_step(self._lease, took, core_waited, collected)
