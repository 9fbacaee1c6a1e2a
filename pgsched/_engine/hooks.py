"""Failure and recovery hooks: ``on_failure(run, error)`` for every failed attempt this replica
wrote (or a stale lease its claim closed), ``on_recovery(run)`` for the first success after a
failed attempt of the same (job, scope). Both the job's and the scheduler's are called.

Called once the terminal write has landed (a lost lease calls nothing), off the writer's path:
queued, and run by at most ``HOOKS_AT_ONCE`` worker tasks (an async hook on the loop, a sync
one in a thread of its own), so a slow hook delays no terminal write and no run, and a storm
of failures starts no storm of threads. A hook that raises is logged (``hook_failed``) and
changes nothing. Whether a success follows a failure: a retry claim follows its own failed attempt;
otherwise one indexed lookup of the scope's previous finished plan, batched, in the hooks'
task, and only for jobs with a recovery hook: a replica without hooks runs no statement more.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from psycopg_pool import AsyncConnectionPool
from structlog.typing import FilteringBoundLogger

from .._errors import (
    RunAbandoned,
    RunFailed,
    RunTimeout,
    StaleLease,
    UnstorableResult,
    describe_error,
)
from .._jobs.spec import JobSpec, RunHooks
from .._records import Row
from .._run import Run
from .._storage.connection import pooled
from .._storage.store import Store
from .._structures import Scope
from .execution import in_thread
from .recorder import Recorder
from .values import Lease, Outcome

_ERRORS: dict[str | None, type[RunFailed]] = {
    "run_timeout": RunTimeout,
    "shutdown": RunAbandoned,
    "stale_timeout": StaleLease,
    "invalid_result": UnstorableResult,
}
Landed = Sequence[tuple[Lease, Outcome, datetime | None]]
HOOKS_AT_ONCE = 8  # hooks (and recovery lookups) running at a time; the others wait in turn


def error_of(outcome: Outcome) -> BaseException:
    """The exception a failure hook receives: the handler's, else one naming the row's error
    (``RunTimeout``, ``RunAbandoned``, ``UnstorableResult``...)."""
    if outcome.error is not None and outcome.error_code == "handler_error":
        return outcome.error
    return _ERRORS.get(outcome.error_code, RunFailed)(outcome.error_msg or outcome.error_code)


def hook_name(hook: Callable[..., Any]) -> str:
    module = getattr(hook, "__module__", None) or "?"
    return f"{module}.{getattr(hook, '__qualname__', None) or type(hook).__qualname__}"


class Hooks:
    """Dispatches the hooks of the outcomes this replica wrote (see the module's doc): it
    listens to ``recorder``, through which every landed write and closed stale lease goes."""

    def __init__(
        self,
        scheduler: RunHooks,
        jobs: Callable[[], Mapping[str, JobSpec]],
        store: Store,
        pool: AsyncConnectionPool[Any],
        recorder: Recorder,
    ) -> None:
        self._scheduler, self._jobs = scheduler, jobs
        self._store, self._pool, self._log = store, pool, recorder.log
        self._queue: deque[Callable[[], Awaitable[None]]] = deque()
        self._workers: set[asyncio.Task[None]] = set()
        recorder.listener = self

    def landed(self, landed: Landed) -> None:
        """Terminal writes that landed: their failure hooks now, their recovery hooks once
        known to follow a failure."""
        unsure: list[Run] = []
        every = self._scheduler
        for lease, outcome, _ in landed:
            own = lease.job.hooks
            if outcome.status == "FAILED":
                if own.on_failure is not None or every.on_failure is not None:
                    self._failed(own, lease.run, error_of(outcome))
            elif own.on_recovery is not None or every.on_recovery is not None:
                if lease.kind == "retry":  # the retry of this plan's failed attempt
                    self._recovered(own, lease.run)
                else:
                    unsure.append(lease.run)
        if unsure:
            self._spawn(functools.partial(self._after_failure, unsure))

    def stale_closed(self, job_name: str, row: Row) -> None:
        """Another holder's stale lease this replica's claim closed FAILED: ``on_failure``
        if this replica registers the job (the dead holder calls nothing)."""
        job = self._jobs().get(job_name)
        if job is None or (job.hooks.on_failure is None and self._scheduler.on_failure is None):
            return
        run = _closed_run(job, row, self._log)
        self._failed(job.hooks, run, StaleLease(row["error_msg"] or "stale_timeout"))

    async def drain(self, within_s: float) -> None:
        """Wait up to ``within_s`` seconds for the hooks still running (at shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while self._workers:  # a recovery lookup may queue hooks of its own meanwhile
            left = deadline - loop.time()
            if left <= 0:
                waiting = len(self._queue) + len(self._workers)
                self._log.warning("hooks_unfinished", hooks=waiting, waited_s=within_s)
                return
            await asyncio.wait(set(self._workers), timeout=left)

    # -- calling ----------------------------------------------------------------------------

    def _failed(self, own: RunHooks, run: Run, error: BaseException) -> None:
        for hook in (own.on_failure, self._scheduler.on_failure):
            if hook is not None:
                self._spawn(functools.partial(self._call, hook, run, error))

    def _recovered(self, own: RunHooks, run: Run) -> None:
        for hook in (own.on_recovery, self._scheduler.on_recovery):
            if hook is not None:
                self._spawn(functools.partial(self._call, hook, run))

    async def _after_failure(self, runs: list[Run]) -> None:
        """The recovery hooks of the successes whose scope's previous plan FAILED."""
        keys = [(run.job, run.scope, run.plan_time) for run in runs]
        try:
            async with pooled(self._pool) as conn:
                before = await self._store.previous_outcomes(conn, keys)
        except Exception as exc:
            self._log.error("hook_lookup_failed", error=describe_error(exc), runs=len(runs))
            return
        for i, run in enumerate(runs):
            job = self._jobs().get(run.job)
            if before.get(i) == "FAILED" and job is not None:
                self._recovered(job.hooks, run)

    async def _call(self, hook: Callable[..., Any], run: Run, *args: Any) -> None:
        try:
            if _is_async(hook):
                await hook(run, *args)
            else:
                await in_thread(lambda r: hook(r, *args), run)
        except Exception as exc:
            self._log.error(
                "hook_failed",
                hook=hook_name(hook),
                job=run.job,
                scope=str(run.scope),
                execution_id=str(run.execution_id),
                error=describe_error(exc),
                exc_info=exc,
            )

    def _spawn(self, work: Callable[[], Awaitable[None]]) -> None:
        self._queue.append(work)
        if len(self._workers) < HOOKS_AT_ONCE:
            task = asyncio.create_task(self._work(), name="pgsched-hooks")
            self._workers.add(task)
            task.add_done_callback(self._workers.discard)

    async def _work(self) -> None:
        while self._queue:
            await self._queue.popleft()()  # each call catches its own errors


def _is_async(hook: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(hook) or inspect.iscoroutinefunction(
        getattr(hook, "__call__", None)  # noqa: B004 - an object with an async __call__
    )


def _closed_run(job: JobSpec, row: Row, log: FilteringBoundLogger) -> Run:
    """The :class:`Run` of a row closed FAILED ``stale_timeout``: its last attempt, by the
    runner that held it."""
    return Run(
        job=job.name,
        scope=Scope(row["scope_kind"], row["scope_id"]),
        plan_time=row["plan_time"].astimezone(UTC),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        execution_id=row["id"],
        lease_token=row["lease_token"],
        fencing_token=row["fencing_token"],
        runner_id=row["runner_id"] or "?",
        trigger=row["trigger"],
        replica_log=log,
        payload=row["payload"] or {},
    )
