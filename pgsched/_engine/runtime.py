"""The replica's engine: an orchestrator over small collaborators. Every tick reads

    visit (``visits``): see (``sighting``) -> claim (``claims``, ``joint``)
    -> start (``execution``) -> outcome -> write (``writer``) -> release (``leases``)

and every event goes to one ``Recorder``. This module owns only the loop: when to tick, the
probe, wake-ups (NOTIFY, freed slots, a plan falling due) and shutdown. It runs no SQL itself
beyond calling the store's probe and registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from psycopg_pool import AsyncConnectionPool

from .._errors import describe_error
from .._jobs.spec import JobSpec
from .._records import Probe
from .._storage.connection import (
    RECONNECT_EVERY_S,
    Backoff,
    WritablePool,
    pool_hosts,
    pooled,
    require_writable,
    synchronous_protection,
    unavailable,
)
from .._storage.servers import ServerWatch
from .._storage.statements import Conn
from .._storage.store import Store
from .._structures import TickReport
from .._telemetry.metrics import Metrics
from .execution import Executor
from .hooks import Hooks
from .leases import LeaseTable
from .recorder import Recorder
from .registration import Registration
from .settings import ReplicaSettings
from .transaction import Transactions
from .visits import Visits
from .writer import LeaseWriter

# A replica ticks this long after a plan falls due (database clock), not up to a tick later.
_DUE_MARGIN_S = 0.005
_LISTEN_CHECK_S = 5.0


def _transactions(settings: ReplicaSettings, store: Store, watch: ServerWatch) -> Transactions:
    """Where transactional runs open their connections."""
    return Transactions(
        settings.conninfo,
        settings.app_name,
        store,
        transaction_pooling=settings.transaction_pooling,
        watch=watch,
        synchronous=settings.synchronous_claims,
        answer_timeout=settings.answer_timeout.total_seconds(),
        run_transaction=settings.run_transaction,
    )


class Runtime:
    """Runs the jobs a scheduler has registered, against one pool, until stopped."""

    def __init__(
        self,
        jobs: Callable[[], Mapping[str, JobSpec]],
        pool: AsyncConnectionPool[Any],
        metrics: Metrics,
        settings: ReplicaSettings,
    ) -> None:
        store = Store(settings.schema)
        self.jobs, self.pool, self.settings, self._store = jobs, pool, settings, store
        self.runner_id = runner_id = settings.runner_id
        self.tick_interval = settings.tick_interval.total_seconds()
        # The server this replica writes to; on a change, what it lacks is put back first.
        self.watch = pool.watch if isinstance(pool, WritablePool) else ServerWatch()
        transactions = _transactions(settings, store, self.watch)
        self.last_tick_ok: float | None = None
        self.last_tick_at: float | None = None  # any tick, failed or not: the loop is alive
        self.recorder = Recorder(metrics, runner_id)
        self.leases = LeaseTable(settings.max_concurrency, self.recorder, self.wake)
        self.registration = Registration(store, pool, self.recorder, settings)
        self.writer = LeaseWriter(
            store=store,
            pool=pool,
            leases=self.leases,
            recorder=self.recorder,
            synchronous=settings.synchronous_claims,
        )
        self.executor = Executor(self.leases, self.recorder, transactions, self.writer.submit)
        self.visits = Visits(
            store,
            runner_id,
            self.recorder,
            self.leases,
            self.executor,
            lookback=settings.tick_interval,
            synchronous=settings.synchronous_claims,
            # the peers' scope lists are read as often as the replica registers
            recheck_every=self.registration.every,
        )
        self.hooks = Hooks(settings.hooks, jobs, store, pool, self.recorder)
        self._follow_failovers()
        self._wake, self._stopping = asyncio.Event(), asyncio.Event()
        self._next_due: float | None = None  # monotonic time the next plan falls due
        self._loops: list[asyncio.Task[None]] = []
        # The last tick the database served to its end (a job's own claim error aside: one
        # bad job must not get the replica restarted); /healthz.
        self.started_at = time.monotonic()
        self._last_served = self.started_at
        self._hosts = pool_hosts(pool)
        # A failed tick is retried at most a second later: work resumes within about a
        # second of the database answering again, however long it was away.
        self._tick_backoff = Backoff(cap=RECONNECT_EVERY_S)
        # With synchronous claims, the first tick served says whether the server can honour
        # them (once: a replica start, not every tick).
        self._standbys_checked = not settings.synchronous_claims

    def _follow_failovers(self) -> None:
        """On a change of server: the held leases' rows are put back first, the new server
        is logged, and first sight writes every job's cursors again (a failover that lost
        commits may lack them)."""
        self.watch.on_adopting(self.writer.reapply)
        self.watch.on_adopted(self.recorder.database_server)
        self.watch.on_adopted(self.visits.sightings.forget_all)

    @property
    def report(self) -> TickReport:
        return self.recorder.report

    def failing(self) -> dict[str, float]:
        """The loops that have not succeeded for longer than the health timeout (task name:
        monotonic time since when): the tick loop since the database last served a whole tick
        (or the start), the writer since its first failed attempt at the write it is
        retrying, and any loop that has ended (which must not happen)."""
        now, bound = time.monotonic(), self.settings.health_timeout.total_seconds()
        since = {"tick": self._last_served, "writer": self.writer.failing_since}
        out = {task: t for task, t in since.items() if t is not None and now - t > bound}
        out.update({t.get_name(): now for t in self._loops if t.done()})
        return out

    def not_writable(self) -> str | None:
        """Why the pool refused its last connection (a read-only server), None when the last
        one it checked could take writes."""
        return self.pool.refused if isinstance(self.pool, WritablePool) else None

    # -- lifecycle ------------------------------------------------------------------------

    def start_background(self, *, listen: bool) -> None:
        """Start the heartbeat and writer loops and, with ``listen``, the NOTIFY listener
        (the tick loop is driven by the caller)."""
        self._loops = [
            asyncio.create_task(
                self.writer.heartbeat_loop(min(1.0, self.tick_interval)), name="pgsched-heartbeat"
            ),
            asyncio.create_task(self.writer.write_loop(), name="pgsched-writer"),
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
            if ok and failures:
                self.recorder.log.info("tick_recovered", failed_ticks=failures)
            failures = 0 if ok else failures + 1
            await self._pause(ok, started)

    async def _pause(self, ok: bool, started: float) -> None:
        """Wait for the next tick: a tick after the last one, or sooner when a plan falls due
        or something wakes the loop (after a failed tick, the backoff's delay: 0.5 s, then
        1 s, while the pool reconnects)."""
        delay = max(0.0, self.tick_interval - (time.monotonic() - started))
        if ok:
            self._tick_backoff.reset()
        else:
            delay = self._tick_backoff.delay()
        if ok and self._next_due is not None:
            delay = min(delay, max(0.0, self._next_due - time.monotonic()))
        waits = [asyncio.ensure_future(self._stopping.wait())]
        if ok:
            waits.append(asyncio.ensure_future(self._wake.wait()))
        _, pending = await asyncio.wait(waits, timeout=delay, return_when="FIRST_COMPLETED")
        for p in pending:
            p.cancel()

    def request_stop(self) -> None:
        self._stopping.set()

    def wake(self) -> None:
        """Tick now rather than at the next interval (slots freed while work remains)."""
        if not self._stopping.is_set():
            self._wake.set()

    async def wait_idle(self) -> None:
        """Return when every claimed execution has finished and its outcome is written."""
        await self.leases.wait_idle()

    async def shutdown(self, grace: timedelta) -> None:
        """Stop claiming; give running handlers ``grace`` to finish, then fail the rest."""
        self._stopping.set()
        if self.leases:
            self.recorder.log.info(
                "shutdown_waiting", running=len(self.leases), grace_s=grace.total_seconds()
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wait_idle(), grace.total_seconds())
        why = f"Shutdown: replica {self.runner_id} stopped before the handler finished"
        for lease in self.leases.all():
            # An outcome already queued (the writer may be waiting out the database) stands.
            if not lease.decided:
                self.executor.abandon(lease, why)
        try:
            await asyncio.wait_for(self.wait_idle(), max(5.0, self.tick_interval * 5))
        except TimeoutError:
            self.recorder.log.warning("shutdown_unwritten", leases=len(self.leases))
        await self.hooks.drain(max(5.0, grace.total_seconds()))
        await self.registration.unregister()
        for task in self._loops:
            task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)

    # -- the tick -------------------------------------------------------------------------

    async def tick(self) -> bool:
        """One tick: probe, then claim per job in priority order. False if it failed."""
        started = time.monotonic()
        try:
            ok = await self._tick()
            self._last_served = time.monotonic()
        except Exception as exc:
            self.recorder.error(
                "tick_error",
                error=describe_error(exc),
                error_class=type(exc).__name__,
                host=self._hosts,
            )
            ok = False
        finally:
            self.last_tick_at = time.monotonic()
            self.recorder.tick(self.last_tick_at - started)
        if ok:
            self.last_tick_ok = self.last_tick_at
        return ok

    async def _tick(self) -> bool:
        jobs = self.jobs()
        if not jobs:
            return True
        ok = True
        async with pooled(self.pool) as conn:
            probe = await self.visits.prober.read(conn, jobs)
            if not self._standbys_checked:
                await _warn_unprotected(self._store, self.recorder, conn, self._hosts)
                self._standbys_checked = True
            renewal = self.registration.registered
            if not renewal:  # the jobs are on record before their first claim
                await self.registration.register(conn, jobs, probe.now)
            await self.visits.sightings.settle(conn)
            ok = await self.visits.visit(conn, jobs, self._stopping)
            if renewal:  # after the claims: a renewal never holds up a due plan
                await self.registration.register(conn, jobs, probe.now)
            probe = await self.visits.prober.fresh(conn, jobs)
        soonest = _next_due(jobs, probe)
        self._next_due = (
            None
            if soonest is None
            else self.visits.prober.read_at + soonest.total_seconds() + _DUE_MARGIN_S
        )
        return ok

    async def _listen_loop(self) -> None:
        """Wake the tick loop on NOTIFY (trigger, pause, resume, backfill); the tick stays
        the fallback for a notification missed while reconnecting. Every few seconds the
        listening connection's server is checked: one that stopped taking writes (a
        switchover) hears no NOTIFY from the new primary, so the loop reconnects."""
        backoff = Backoff()
        while True:
            try:
                async with pooled(self.pool) as conn:
                    await self._store.listen(conn)
                    if backoff.failures:  # a NOTIFY may have been missed meanwhile
                        self.wake()
                    backoff.reset()
                    while True:
                        async for _ in conn.notifies(timeout=_LISTEN_CHECK_S):
                            self.wake()
                        await require_writable(self._store, conn, self.watch)
            except Exception as exc:
                delay = backoff.delay()
                self.recorder.log.warning(
                    "listen_error",
                    error=describe_error(exc),
                    error_class=type(exc).__name__,
                    host=self._hosts,
                    retry_in_s=delay,
                )
                await asyncio.sleep(delay)


def _next_due(jobs: Mapping[str, JobSpec], probe: Probe) -> timedelta | None:
    """How long after the probe the earliest cursor (or stored schedule) of a job falls due."""
    waits = [
        nxt + jobs[name].schedule_delay - probe.now
        for name, nxt in probe.next_due.items()
        if nxt is not None and name not in probe.paused and name in jobs
    ]
    future = [w for w in waits if w > timedelta(0)]
    return min(future) if future else None


async def _warn_unprotected(store: Store, recorder: Recorder, conn: Conn, hosts: str) -> None:
    """Warn when the server cannot make commits wait for a synchronous standby (checked once
    per replica, with synchronous claims on)."""
    try:
        found = await synchronous_protection(store, conn)
    except Exception as exc:
        if conn.broken or unavailable(exc):
            raise  # the tick fails; checked again at the next one
        recorder.log.warning("synchronous_claims_unchecked", error=describe_error(exc))
        return
    if found is not None:
        event, why = found
        recorder.log.warning(event, reason=why, host=hosts)
