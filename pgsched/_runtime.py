"""The replica's engine: ticks, claims, runs handlers, heartbeats leases, writes outcomes.

One asyncio loop owns everything. Async handlers run on it; sync handlers run in daemon
threads (so a handler abandoned at ``run_timeout`` cannot keep the process alive). Database
work is batched per tick: one probe, then per job with work one short transaction; all
heartbeats of the replica in one statement; terminal writes in batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg_pool import AsyncConnectionPool

from . import _transaction as _tx
from ._config import JobSpec, evaluate_scopes
from ._errors import LeaseLost
from ._metrics import Metrics
from ._model import Run, Scope, bound_logger
from ._planning import PlanCursor, count_plans_between, jitter_offset
from ._results import InvalidResult, describe_error, encode_result
from ._store import Conn, Finish, Probe, Row, Store

_SKIP_COUNT_CAP = 10_000
_FINISH_BATCH = 2_000
# A claim of one plan for more scopes than this looks at them this many at a time, so its
# cost follows the rows it can claim, not the size of the fan-out.
CLAIM_CHUNK = 1_000
# New plans of one due instant are claimed at most this many per transaction (see _tick_job).
CLAIM_BATCH = 1_000
# A replica ticks this long after a plan falls due (database clock), not up to a tick later.
_DUE_MARGIN_S = 0.005
# With other leases still running, the writer waits up to this long for more outcomes.
_FINISH_LINGER_S = 0.05
_REGISTER_EVERY = 60.0
# Errors that say nothing about the statement, only the connection: try again later.
_TRANSIENT = (psycopg.OperationalError, psycopg.InterfaceError)


@dataclass
class TickReport:
    """Counts of what a replica did; ``run_once()`` returns one for its tick."""

    claimed: int = 0
    stolen: int = 0
    retried: int = 0
    conflicts: int = 0
    closed_stale: int = 0
    skipped: int = 0
    succeeded: int = 0
    failed: int = 0
    leases_lost: int = 0
    errors: int = 0

    @property
    def started(self) -> int:
        """Executions this replica started (new claims, steals and retries)."""
        return self.claimed + self.stolen + self.retried


@dataclass(eq=False)
class _Lease:
    job: JobSpec
    run: Run
    next_beat: float
    abandoned: bool = False
    claim_lag: float | None = None  # seconds late at claim, for first scheduled attempts
    claimed_at: float = field(default_factory=time.monotonic)
    task: asyncio.Future[Any] | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _JobMemo:
    cursor: PlanCursor
    settled_plan: datetime | None = None
    settled_scopes: object = None
    late_counted: datetime | None = None
    # A large single-plan fan-out is claimed chunk by chunk: the starts of the chunks of
    # `chunk_scopes` that may still lack a row for `chunk_plan` (rows never go away, so a
    # chunk found settled stays settled).
    chunk_plan: datetime | None = None
    chunk_scopes: object = None
    chunks: list[int] = field(default_factory=list)


class Runtime:
    """Runs the jobs a scheduler has registered, against one pool, until stopped."""

    def __init__(
        self,
        *,
        jobs: Callable[[], dict[str, JobSpec]],
        store: Store,
        pool: AsyncConnectionPool[Any],
        runner_id: str,
        max_concurrency: int,
        tick_interval: timedelta,
        events: Metrics,
        conninfo: str,
        app_name: str,
    ) -> None:
        self._jobs = jobs
        self._store = store
        self._conninfo, self._app_name = conninfo, app_name
        self._pool = pool
        self.runner_id = runner_id
        self.max_concurrency = max_concurrency
        self.tick_interval = tick_interval.total_seconds()
        self.report = TickReport()
        self.last_tick_ok: float | None = None
        self.last_tick_at: float | None = None  # any tick, failed or not: the loop is alive
        self._events = events
        self._log = bound_logger(runner_id=runner_id)
        self._leases: dict[UUID, _Lease] = {}
        # overlap="forbid": the latest lease of each (job, scope); a newer one waits for it.
        self._tails: dict[tuple[str, Scope], _Lease] = {}
        self._memos: dict[str, _JobMemo] = {}
        self._outbox: asyncio.Queue[tuple[_Lease, Finish]] = asyncio.Queue()
        self._write_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._more_work = False
        self._next_due: float | None = None  # monotonic time the next plan falls due
        self._stopping = asyncio.Event()
        self._loops: list[asyncio.Task[None]] = []
        self._registered: list[tuple[str, str]] = []
        self._registered_at = 0.0

    # -- lifecycle ----------------------------------------------------------------------

    def start_background(self, *, listen: bool) -> None:
        """Start the heartbeat and writer loops and, with ``listen``, the NOTIFY listener
        (the tick loop is driven by the caller)."""
        self._loops = [
            asyncio.create_task(self._heartbeat_loop(), name="pgsched-heartbeat"),
            asyncio.create_task(self._writer_loop(), name="pgsched-writer"),
        ]
        if listen:
            self._loops.append(asyncio.create_task(self._listen_loop(), name="pgsched-listen"))

    async def run_forever(self) -> None:
        """Tick every ``tick_interval`` until :meth:`request_stop`; never dies on DB errors."""
        failures = 0
        while not self._stopping.is_set():
            started = time.monotonic()
            # Cleared before the tick: a wake-up (NOTIFY, freed slot) arriving during the
            # tick must start the next one at once, not be forgotten.
            self._wake.clear()
            ok = await self.tick()
            if ok:
                if failures:
                    self._log.info("tick_recovered", failed_ticks=failures)
                failures = 0
            else:
                failures += 1
            delay = max(0.0, self.tick_interval - (time.monotonic() - started))
            if ok and self._next_due is not None:  # a plan falls due before the next tick
                delay = min(delay, max(0.0, self._next_due - time.monotonic()))
            waits = [asyncio.ensure_future(self._stopping.wait())]
            if ok:  # after a failure wait a whole tick; the pool reconnects meanwhile
                waits.append(asyncio.ensure_future(self._wake.wait()))
            _, pending = await asyncio.wait(waits, timeout=delay, return_when="FIRST_COMPLETED")
            for p in pending:
                p.cancel()

    def request_stop(self) -> None:
        self._stopping.set()

    def wake(self) -> None:
        """Tick now rather than at the next interval (slots freed while work remains)."""
        self._wake.set()

    async def wait_idle(self) -> None:
        """Return when every claimed execution has finished and its outcome is written."""
        while self._leases:
            await asyncio.gather(*(lease.done.wait() for lease in list(self._leases.values())))

    async def shutdown(self, grace: timedelta) -> None:
        """Stop claiming; give running handlers ``grace`` to finish, then fail the rest."""
        self._stopping.set()
        if self._leases:
            self._log.info(
                "shutdown_waiting", running=len(self._leases), grace_s=grace.total_seconds()
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait_idle(), grace.total_seconds())
        for lease in list(self._leases.values()):
            if lease.abandoned or lease.done.is_set():
                continue
            lease.abandoned = True
            if lease.task is not None:
                lease.task.cancel()
            self._queue_shutdown(lease)
        try:
            await asyncio.wait_for(self.wait_idle(), max(5.0, self.tick_interval * 5))
        except TimeoutError:
            self._log.warning("shutdown_unwritten", leases=len(self._leases))
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)

    # -- the tick -----------------------------------------------------------------------

    async def tick(self) -> bool:
        """One tick: probe, then claim per job in priority order. False if it failed."""
        started = time.monotonic()
        try:
            return await self._tick()
        finally:
            self.last_tick_at = time.monotonic()
            self._events.tick(self.last_tick_at - started)

    async def _tick(self) -> bool:
        jobs = self._jobs()
        ok = True
        try:
            if jobs:
                async with self._pool.connection() as conn:
                    probe = await self._store.probe(conn, list(jobs))
                    probed_at = time.monotonic()
                    await self._register(conn, jobs)
                    ordered = sorted(jobs.values(), key=lambda j: (-j.priority, j.name))
                    for job in ordered:
                        if job.name in probe.paused or self._stopping.is_set():
                            continue
                        first = True
                        while not self._stopping.is_set():
                            try:
                                claimed, again = await self._tick_job(conn, job, probe, first)
                            except Exception as exc:
                                memo = self._memos.get(job.name)
                                if memo is not None:  # its claims may have been rolled back
                                    memo.settled_plan = memo.chunk_plan = None
                                if conn.broken:
                                    raise
                                ok = False  # one job's failure must not stop the others
                                self.report.errors += 1
                                self._log.error(
                                    "tick_error", job=job.name, error=describe_error(exc)
                                )
                                break
                            # Start right after the commit: the next job (or batch) sees the
                            # slots taken, and no later failure can orphan these claims. Oldest
                            # plan first, so chained plans of one scope run in plan order.
                            for row in sorted(claimed, key=lambda c: c[0]["plan_time"]):
                                self._start(job, *row)
                            if not again:
                                break
                            first = False
                    self._next_due = self._next_due_at(jobs, probe.now, probed_at)
        except Exception as exc:
            self.report.errors += 1
            self._log.error("tick_error", error=describe_error(exc))
            return False
        self.last_tick_ok = time.monotonic()
        return ok

    def _next_due_at(
        self, jobs: dict[str, JobSpec], now: datetime, probed_at: float
    ) -> float | None:
        """When (monotonic) the next plan of any job falls due, so the loop can tick then
        rather than up to a tick later; ``now`` is the database's clock at ``probed_at``."""
        soonest: timedelta | None = None
        for job in jobs.values():
            memo = self._memos.get(job.name)
            nxt = memo.cursor.next_plan if memo is not None else None
            if nxt is None:
                continue
            wait = nxt + job.schedule_delay - now
            if wait > timedelta(0) and (soonest is None or wait < soonest):
                soonest = wait
        if soonest is None:
            return None
        return probed_at + soonest.total_seconds() + _DUE_MARGIN_S

    async def _register(self, conn: Conn, jobs: dict[str, JobSpec]) -> None:
        """Record this replica's jobs in job_state when they change, and once a minute."""
        entries = sorted((name, spec.schedule.describe()) for name, spec in jobs.items())
        now = time.monotonic()
        if entries == self._registered and now - self._registered_at < _REGISTER_EVERY:
            return
        await self._store.register_jobs(conn, entries, self.runner_id)
        self._registered, self._registered_at = entries, now

    async def _tick_job(
        self, conn: Conn, job: JobSpec, probe: Probe, first: bool = True
    ) -> tuple[list[tuple[Row, str]], bool]:
        """Claim what ``job`` may claim now, in one transaction; returns the (row, outcome)
        pairs and whether to claim again at once: a large fan-out is claimed in batches of
        ``CLAIM_BATCH`` new plans, one short transaction each, so the replicas take turns
        (the job's lock is released between batches) and the first handlers start early."""
        free = self.max_concurrency - len(self._leases)
        stale = first and job.name in probe.stale
        existing = (
            first and free > 0 and (stale or job.name in probe.retry or job.name in probe.pending)
        )
        request = await self._plan_request(job, probe.now) if free > 0 else None
        if not (stale or existing or request):
            return [], False
        claimed: list[tuple[Row, str]] = []
        again = False
        async with conn.transaction():
            await self._store.lock_job(conn, job.name)
            if stale:
                for row in await self._store.close_stale(
                    conn, job.name, reentry=job.allow_stale_reentry
                ):
                    self.report.closed_stale += 1
                    self._log.warning(
                        "stale_closed",
                        job=job.name,
                        scope=f"{row['scope_kind']}:{row['scope_id']}",
                        plan_time=_iso(row["plan_time"]),
                        attempt=row["attempt"],
                        execution_id=str(row["id"]),
                        previous_runner=row["runner_id"],
                    )
            cap = free
            if job.max_running is not None:
                cap = min(cap, job.max_running - await self._store.running_count(conn, job.name))
            if existing and cap > 0:
                rows = await self._store.claim_existing(
                    conn,
                    job.name,
                    runner=self.runner_id,
                    stale=job.stale_timeout,
                    limit=cap,
                    reentry=job.allow_stale_reentry,
                    forbid=job.overlap == "forbid",
                    max_attempts=job.max_attempts,
                )
                for row in rows:
                    outcome = {"RUNNING": "stole", "FAILED": "retry"}.get(
                        row["previous_status"], "won"
                    )
                    claimed.append((row, outcome))
                cap -= len(rows)
            if request is not None and cap > 0:
                batch = min(cap, CLAIM_BATCH) if len(request.plans) == 1 else cap
                won = await self._claim_new(conn, job, request, batch)
                claimed.extend(won)
                again = batch < cap and len(won) >= batch
            elif request is not None:
                self._more_work = True
        return claimed, again

    async def _plan_request(self, job: JobSpec, now: datetime) -> _PlanRequest | None:
        """What to offer the claim statement for new plans, or None when nothing is new."""
        memo = self._memos.get(job.name)
        if memo is None:
            memo = self._memos[job.name] = _JobMemo(job.new_cursor())
        due = memo.cursor.due(now)
        if due.late:
            self._count_late(job, memo, due.late)
        if not due.plans:
            return None
        scopes = await self._scopes(job, now)
        if scopes is None:
            return None
        newest = due.plans[-1]
        if memo.settled_plan == newest and (
            memo.settled_scopes is scopes or memo.settled_scopes == scopes
        ):
            return None
        ready_all = True
        if job.jitter > timedelta(0):
            start_at = newest + job.schedule_delay
            ready = [
                now >= start_at + jitter_offset(job.name, s.kind, s.id, newest, job.jitter)
                for s in scopes
            ]
            ready_all = all(ready)
            if len(due.plans) == 1:
                scopes = [s for s, ok in zip(scopes, ready, strict=True) if ok]
                if not scopes:
                    return None
            # With several due plans only the newest can still be inside its jitter; older
            # ones are offered to every scope.
        return _PlanRequest(memo, list(due.plans), scopes, settle=ready_all)

    def _count_late(self, job: JobSpec, memo: _JobMemo, late: list[datetime]) -> None:
        """Count each plan dropped by max_lateness once, unless every scope already ran it."""
        fresh = [
            p
            for p in late
            if (memo.late_counted is None or p > memo.late_counted)
            and (memo.settled_plan is None or p > memo.settled_plan)
        ]
        memo.late_counted = max(late)
        if fresh:
            self.report.skipped += len(fresh)
            self._events.plans_skipped(job.name, "max_lateness", len(fresh))

    async def _scopes(self, job: JobSpec, now: datetime) -> tuple[Scope, ...] | list[Scope] | None:
        try:
            return await evaluate_scopes(job, now)
        except Exception as exc:
            self.report.errors += 1
            self._log.error("scopes_error", job=job.name, error=describe_error(exc))
            return None

    async def _claim_new(
        self, conn: Conn, job: JobSpec, request: _PlanRequest, cap: int
    ) -> list[tuple[Row, str]]:
        scopes = request.scopes
        if len(request.plans) != 1 or len(scopes) <= CLAIM_CHUNK:
            # Several plans are claimed oldest first across every scope, so in one statement.
            won, settled = await self._claim_scopes(conn, job, request, scopes, cap)
            if settled and request.settle:
                request.memo.settled_plan = request.plans[-1]
                request.memo.settled_scopes = request.scopes
            elif not settled:
                self._more_work = True
            return won
        memo, plan = request.memo, request.plans[0]
        if memo.chunk_plan != plan or not (
            memo.chunk_scopes is scopes or memo.chunk_scopes == scopes
        ):
            memo.chunk_plan, memo.chunk_scopes = plan, scopes
            memo.chunks = list(range(0, len(scopes), CLAIM_CHUNK))
        claimed: list[tuple[Row, str]] = []
        unsettled: list[int] = []
        for i, start in enumerate(memo.chunks):
            if cap <= 0:
                unsettled.extend(memo.chunks[i:])
                break
            part = scopes[start : start + CLAIM_CHUNK]
            won, settled = await self._claim_scopes(conn, job, request, part, cap)
            claimed.extend(won)
            cap -= len(won)
            if not settled:  # rows left beyond the free slots, or blocked by overlap
                unsettled.append(start)
        memo.chunks = unsettled
        if not unsettled and request.settle:
            memo.settled_plan, memo.settled_scopes = plan, scopes
        elif unsettled:
            self._more_work = True
        return claimed

    async def _claim_scopes(
        self,
        conn: Conn,
        job: JobSpec,
        request: _PlanRequest,
        scopes: list[Scope] | tuple[Scope, ...],
        cap: int,
    ) -> tuple[list[tuple[Row, str]], bool]:
        """One claim statement for ``scopes``; returns the rows won and whether every
        candidate now has a row (nothing is left to claim for these scopes and plans)."""
        result = await self._store.claim_new(
            conn,
            job.name,
            kinds=[s.kind for s in scopes],
            ids=[s.id for s in scopes],
            plans=request.plans,
            runner=self.runner_id,
            stale=job.stale_timeout,
            limit=cap,
            per_scope=job.max_plans_per_tick,
            after_latest=job.catch_up == "every_plan",
            forbid=job.overlap == "forbid",
            max_attempts=job.max_attempts,
        )
        won = len(result.rows)
        conflicts = result.picked - won
        if conflicts:
            self.report.conflicts += conflicts
            self._events.claims(job.name, "conflict", conflicts)
        if job.catch_up == "latest_only":
            self._count_superseded(job, result.rows)
        if result.rows:  # hand the request's (validated) Scope objects to _start
            known = {(s.kind, s.id): s for s in scopes}
            for row in result.rows:
                row["scope"] = known.get((row["scope_kind"], row["scope_id"]))
        return [(row, "won") for row in result.rows], result.remaining <= won

    def _count_superseded(self, job: JobSpec, rows: list[Row]) -> None:
        memo: dict[tuple[datetime, datetime], int] = {}
        skipped = 0
        for row in rows:
            previous = row["previous_plan"]
            if previous is None:
                continue
            key = (previous, row["plan_time"])
            if key not in memo:
                memo[key] = count_plans_between(
                    job.schedule, previous, row["plan_time"], _SKIP_COUNT_CAP
                )
            skipped += memo[key]
        if skipped:
            self.report.skipped += skipped
            self._events.plans_skipped(job.name, "superseded", skipped)

    # -- executions ---------------------------------------------------------------------

    def _start(self, job: JobSpec, row: Row, outcome: str) -> None:
        scope = row.get("scope") or Scope(row["scope_kind"], row["scope_id"])
        plan_time = row["plan_time"].astimezone(UTC)
        trigger = row.get("trigger", "schedule")
        log = self._log.bind(  # already bound to runner_id; binding on it is cheap
            job=job.name,
            scope=str(scope),
            plan_time=plan_time.isoformat(),
            attempt=row["attempt"],
            execution_id=str(row["id"]),
        )
        run = Run(
            job=job.name,
            scope=scope,
            plan_time=plan_time,
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            execution_id=row["id"],
            lease_token=row["lease_token"],
            fencing_token=row["fencing_token"],
            runner_id=self.runner_id,
            trigger=trigger,
            log=log,
            _stale_timeout_s=job.stale_timeout.total_seconds(),
        )
        lease = _Lease(
            job, run, next_beat=time.monotonic() + job.heartbeat_interval.total_seconds()
        )
        if outcome == "won" and trigger == "schedule" and row.get("started_at") is not None:
            # The claim's database time less the due time; _execute adds any local wait.
            lease.claim_lag = (row["started_at"] - plan_time - job.schedule_delay).total_seconds()
        self._leases[run.execution_id] = lease
        counter = {"won": "claimed", "stole": "stolen", "retry": "retried"}[outcome]
        setattr(self.report, counter, getattr(self.report, counter) + 1)
        self._events.claims(job.name, outcome, 1)
        extra = {"previous_runner": row.get("previous_runner")} if outcome == "stole" else {}
        log.info(
            "claimed", outcome=outcome, trigger=trigger, fencing_token=run.fencing_token, **extra
        )
        previous = None
        if job.overlap == "forbid":
            previous = self._tails.get((job.name, scope))
            self._tails[(job.name, scope)] = lease
        lease.task = asyncio.ensure_future(self._execute(lease, previous))

    async def _execute(self, lease: _Lease, previous: _Lease | None) -> None:
        job, run = lease.job, lease.run
        if previous is not None:
            try:
                await previous.done.wait()  # the scope's earlier plan is still running here
            except asyncio.CancelledError:
                if not lease.abandoned:
                    raise
                return
            if run._lost:
                self._lost(lease, "lease lost while waiting for the scope's earlier plan")
                return
        started = time.monotonic()
        if lease.claim_lag is not None:
            self._events.started_late(job.name, lease.claim_lag + started - lease.claimed_at)
        timeout = job.run_timeout.total_seconds()
        scope_timeout = asyncio.timeout(timeout)
        try:
            async with scope_timeout:
                if job.transactional:
                    self._committed(lease, await self._transactional(lease, started))
                    return
                if job.is_async:
                    value = await job.handler(run)
                else:
                    value = await _in_thread(job.handler, run)
        except asyncio.CancelledError:
            if not lease.abandoned:
                raise
            return
        except TimeoutError as exc:
            if scope_timeout.expired():
                self._finish(
                    lease,
                    started,
                    "FAILED",
                    "run_timeout",
                    f"TimeoutError: handler ran longer than run_timeout ({job.run_timeout})",
                )
            else:
                self._finish(lease, started, "FAILED", "handler_error", describe_error(exc))
            return
        except LeaseLost:
            self._lost(lease, "handler raised LeaseLost")
            return
        except InvalidResult as exc:  # a transactional run's result, refused before commit
            self._finish(lease, started, "FAILED", "invalid_result", describe_error(exc))
            return
        except Exception as exc:
            run.log.warning("handler_raised", error=describe_error(exc), exc_info=exc)
            self._finish(lease, started, "FAILED", "handler_error", describe_error(exc))
            return
        try:
            encoded = encode_result(value)
        except Exception as exc:  # InvalidResult, or anything odd a custom object raises
            self._finish(lease, started, "FAILED", "invalid_result", describe_error(exc))
            return
        self._finish(
            lease, started, "SUCCESS", None, None, encoded.rows_affected, encoded.result_json
        )

    def _finish(
        self,
        lease: _Lease,
        started: float,
        status: str,
        error_code: str | None,
        error_msg: str | None,
        rows: int | None = None,
        result_json: str | None = None,
    ) -> None:
        if lease.abandoned:
            return  # shutdown already wrote (or is writing) this lease's outcome
        if lease.run._lost:  # known lost; a merely late renewal still tries (the token decides)
            self._lost(lease, "lease lost before the outcome could be written")
            return
        self._outbox.put_nowait(
            (lease, _outcome(lease, started, status, error_code, error_msg, rows, result_json))
        )

    async def _transactional(self, lease: _Lease, started: float) -> _tx.Written | None:
        job, run = lease.job, lease.run

        def success(value: object) -> Finish:
            encoded = encode_result(value)
            return _outcome(
                lease, started, "SUCCESS", None, None, encoded.rows_affected, encoded.result_json
            )

        args = (self._conninfo, self._app_name, self._store, job.handler, run, job.run_timeout)
        if job.is_async:
            return await _tx.run_async(*args, success)
        return await _in_thread(lambda r: _tx.run_sync(*args, success), run)  # type: ignore[no-any-return]

    def _committed(self, lease: _Lease, written: _tx.Written | None) -> None:
        if written is None:
            self._lost(lease, "SUCCESS write matched no row holding this lease: rolled back")
            return
        fin, next_retry_at = written
        self._record_outcome(lease, fin, next_retry_at)
        self._release(lease)

    def _queue_shutdown(self, lease: _Lease) -> None:
        fin = _outcome(
            lease,
            time.monotonic(),
            "FAILED",
            "shutdown",
            f"Shutdown: replica {self.runner_id} stopped before the handler finished",
        )
        # Abandoned at shutdown: retryable at once elsewhere, whatever the job's backoff.
        self._outbox.put_nowait((lease, replace(fin, retry_delay_s=0.0)))

    def _release(self, lease: _Lease) -> None:
        self._leases.pop(lease.run.execution_id, None)
        key = (lease.job.name, lease.run.scope)
        if self._tails.get(key) is lease:
            del self._tails[key]
        lease.done.set()
        if self._more_work and not self._stopping.is_set() and self._free_enough():
            self._more_work = False
            self.wake()

    def _free_enough(self) -> bool:
        """Whether enough slots are free to tick early for the work left over: a claim costs
        about the same for one row as for thousands, so a large replica waits for a quarter
        of its slots (or the next tick) rather than claiming a row per finished run."""
        free = self.max_concurrency - len(self._leases)
        return not self._leases or free >= max(1, self.max_concurrency // 4)

    def _lost(self, lease: _Lease, why: str) -> None:
        """The lease is gone: count it (once) and free its slot."""
        self._note_lost(lease, why)
        self._release(lease)

    def _note_lost(self, lease: _Lease, why: str) -> None:
        if lease.run._lost:
            return  # already counted when it was found lost
        lease.run._mark_lost()
        self.report.leases_lost += 1
        self._events.lease_lost(lease.job.name)
        lease.run.log.warning("lease_lost", reason=why)

    # -- background loops ---------------------------------------------------------------

    async def _writer_loop(self) -> None:
        while True:
            batch = [await self._outbox.get()]
            # While other leases may still finish, wait briefly for their outcomes: one
            # statement for many rows is far cheaper than many statements for a few (and a
            # terminal write delays no start).
            linger_until = time.monotonic() + _FINISH_LINGER_S
            while len(batch) < _FINISH_BATCH:
                if not self._outbox.empty():
                    batch.append(self._outbox.get_nowait())
                elif len(self._leases) > len(batch) and time.monotonic() < linger_until:
                    await asyncio.sleep(_FINISH_LINGER_S / 10)
                else:
                    break
            written = await self._write(batch)
            for lease, fin in batch:
                if fin.id not in written:
                    self._lost(lease, "terminal write matched no row holding this lease")
                    continue
                self._record_outcome(lease, fin, written[fin.id])
                self._release(lease)

    async def _write(self, batch: list[tuple[_Lease, Finish]]) -> dict[UUID, datetime | None]:
        """Write a batch; connection trouble is retried, a row that cannot be stored is not."""
        while True:
            try:
                return await self._finish_rows([fin for _, fin in batch])
            except _TRANSIENT as exc:
                self._log.error("write_error", error=describe_error(exc), pending=len(batch))
                await asyncio.sleep(self.tick_interval)
            except Exception:
                break  # something in the batch itself is unstorable: find it row by row
        written: dict[UUID, datetime | None] = {}
        for lease, fin in batch:
            try:
                written.update(await self._finish_rows([fin]))
            except _TRANSIENT:
                raise
            except Exception as exc:
                fallback = replace(
                    fin,
                    status="FAILED",
                    error_code="invalid_result",
                    rows_affected=None,
                    result_json=None,
                    error_msg=describe_error(exc)[:200] + " (while storing the outcome)",
                )
                lease.run.log.error("outcome_unstorable", error=describe_error(exc))
                written.update(await self._finish_rows([fallback]))
        return written

    async def _finish_rows(self, rows: list[Finish]) -> dict[UUID, datetime | None]:
        async with self._write_lock, self._pool.connection() as conn:
            return await self._store.finish(conn, rows)

    def _record_outcome(self, lease: _Lease, fin: Finish, next_retry_at: datetime | None) -> None:
        seconds = fin.duration_ms / 1000
        if fin.status == "SUCCESS":
            self.report.succeeded += 1
            lease.run.log.info(
                "run_succeeded", duration_ms=fin.duration_ms, rows_affected=fin.rows_affected
            )
        else:
            self.report.failed += 1
            lease.run.log.warning(
                "run_failed",
                error_code=fin.error_code,
                error=fin.error_msg,
                duration_ms=fin.duration_ms,
                next_retry_at=None if next_retry_at is None else _iso(next_retry_at),
            )
        self._events.run_finished(lease.job.name, fin.status, seconds)

    async def _listen_loop(self) -> None:
        """Wake the tick loop on NOTIFY (trigger, pause, resume, backfill); the tick stays
        the fallback for a notification missed while reconnecting."""
        while True:
            try:
                async with self._pool.connection() as conn:
                    await self._store.listen(conn)
                    async for _ in conn.notifies():
                        self.wake()
            except Exception as exc:
                self._log.warning("listen_error", error=describe_error(exc))
                await asyncio.sleep(self.tick_interval)

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(min(1.0, self.tick_interval))
            now = time.monotonic()
            due = [
                lease
                for lease in self._leases.values()
                if now >= lease.next_beat and not lease.abandoned and not lease.run._lost
            ]
            if not due:
                continue
            try:
                async with self._write_lock, self._pool.connection() as conn:
                    held = await self._store.heartbeat(
                        conn,
                        [
                            (
                                lease.run.execution_id,
                                lease.run.lease_token,
                                lease.job.stale_timeout.total_seconds(),
                            )
                            for lease in due
                        ],
                    )
            except Exception as exc:
                self._log.error("heartbeat_error", error=describe_error(exc), leases=len(due))
                continue
            for lease in due:
                if lease.run.execution_id in held:
                    lease.run._mark_renewed()
                    lease.next_beat = now + lease.job.heartbeat_interval.total_seconds()
                else:
                    self._note_lost(lease, "heartbeat matched no row holding this lease")


@dataclass(eq=False)
class _PlanRequest:
    memo: _JobMemo
    plans: list[datetime]
    scopes: list[Scope] | tuple[Scope, ...]
    settle: bool


def _in_thread(fn: Callable[[Run], Any], run: Run) -> asyncio.Future[Any]:
    """Run a sync handler in a daemon thread; abandoning the future abandons the thread."""
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
            value, ok = context.run(fn, run), True
        except Exception as exc:
            value, ok = exc, False
        except BaseException as exc:  # SystemExit, KeyboardInterrupt: a failure of this run,
            # not of the scheduler (asyncio futures must not carry them)
            value, ok = RuntimeError(f"handler raised {type(exc).__name__}: {exc}"), False
        with contextlib.suppress(RuntimeError):  # the loop is closed: the scheduler has gone
            loop.call_soon_threadsafe(deliver, ok, value)

    threading.Thread(target=target, name=f"pgsched:{run.job}", daemon=True).start()
    return future


def _iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()


def _outcome(
    lease: _Lease,
    started: float,
    status: str,
    error_code: str | None,
    error_msg: str | None,
    rows: int | None = None,
    result_json: str | None = None,
) -> Finish:
    """The terminal write for ``lease``; FAILED rows carry the job's retry delay."""
    run = lease.run
    retry = lease.job.retry_delay(run.attempt, run.max_attempts) if status == "FAILED" else None
    duration_ms = min(int((time.monotonic() - started) * 1000), 2**31 - 1)
    return Finish(
        run.execution_id,
        run.lease_token,
        status,
        error_code,
        error_msg,
        rows,
        result_json,
        duration_ms,
        None if retry is None else retry.total_seconds(),
    )
