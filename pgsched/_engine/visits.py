"""The tick's visits of the jobs, in the replica's claim order: each job's scopes seen, its
claims made (jointly with the jobs of its priority whose claim is the plain one, else in a
transaction of its own, several for a large fan-out) and started. Owns the claim side's
collaborators (first sight, the probe, the claimers, the ledger's figures) and each job's
claim size: how many due plans its next claim takes.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from datetime import timedelta

from .._errors import describe_error
from .._jobs.spec import JobSpec
from .._records import Probe
from .._storage.connection import unavailable
from .._storage.statements import Conn
from .._storage.store import Store
from .._structures import Scope
from .._telemetry.tracing import recording
from .claims import BATCH_JOB_CLAIM, CLAIM_LIMIT, FIRST_CLAIM, Claimer
from .execution import Executor
from .figures import LedgerFigures
from .joint import JointClaimer, Turn, joins
from .leases import LeaseTable, open_lease
from .probing import Prober
from .recorder import Recorder
from .sighting import Sightings
from .transactions import ClaimTransactions
from .values import Claim, Claimed, Lease

# A joint claim takes the turns of jobs whose due cursors number at most this many (a turn
# counts its scopes, at most its claim size), as a job's first claim takes at most
# FIRST_CLAIM plans: replicas that woke for the same instant share its plans (each starts
# on jobs of its own, claim_order) instead of one claiming them all and sending them one
# after another while the others find nothing, and the first handlers start early.
JOINT_CURSORS = FIRST_CLAIM
Known = Mapping[tuple[str, str], Scope]


class Visits:
    """One replica's visits of its jobs, tick after tick."""

    def __init__(
        self,
        store: Store,
        runner: str,
        recorder: Recorder,
        leases: LeaseTable,
        executor: Executor,
        *,
        lookback: timedelta,
        synchronous: bool,
        recheck_every: float,
    ) -> None:
        """``lookback``: the tick interval (first sight counts a plan this old);
        ``synchronous``: claims wait for a synchronous standby; ``recheck_every``: how often
        the peers' scope lists are compared with this replica's."""
        self._runner, self._recorder = runner, recorder
        self._leases, self._executor = leases, executor
        self.sightings = Sightings(store, recorder, lookback, runner, recheck_every)
        self.prober = Prober(store)
        transactions = ClaimTransactions(
            store.schema, runner, recorder, synchronous=synchronous, lookback=lookback
        )
        self._claimer, self._joint = Claimer(transactions), JointClaimer(transactions)
        self._figures = LedgerFigures(store)
        # Per job, how many due plans its next claim takes: FIRST_CLAIM once a fan-out is
        # drained, doubling while claims come back full (a long fan-out keeps its size).
        self._claim_sizes: dict[str, int] = {}
        # The jobs with work due when the visit began, and how many of each priority: while
        # several of one priority have, each claims within its fair share of the slots
        # (LeaseTable.free_for); a higher priority still claims first.
        self._due: frozenset[str] = frozenset()
        self._due_of_priority: Counter[int] = Counter()

    async def visit(self, conn: Conn, jobs: Mapping[str, JobSpec], stopping: asyncio.Event) -> bool:
        """Visit every job not paused, until ``stopping``; False if a job's claim failed
        (the others still get theirs). The jobs of one priority whose claim is the plain one
        are claimed jointly once all of them are seen (or the claim is full); the others of
        that priority claim alone meanwhile, so the priorities keep their order."""
        ok, turns = True, list[Turn]()
        probe = await self.prober.fresh(conn, jobs)
        self._due = due_jobs(jobs, probe)
        self._due_of_priority = Counter(jobs[name].priority for name in self._due)
        for job in self._claimer.order(jobs.values(), probe.replicas):
            probe = await self.prober.fresh(conn, jobs)
            if turns and job.priority != turns[0].job.priority:
                ok = await self._claim_jointly(conn, turns, probe, stopping) and ok
                turns = []
            if job.name in probe.paused or stopping.is_set():
                continue
            if not joins(job, probe):
                ok = await self._visit_alone(conn, job, probe, stopping) and ok
                continue
            try:
                turn = await self._turn(conn, job, probe)
            except Exception as exc:
                ok = self._failed(conn, job, exc)
                continue
            turns += [turn] if turn is not None else []
            if sum(t.cursors for t in turns) >= JOINT_CURSORS:
                ok = await self._claim_jointly(conn, turns, probe, stopping) and ok
                turns = []
        if not turns:
            return ok
        probe = await self.prober.fresh(conn, jobs)
        return await self._claim_jointly(conn, turns, probe, stopping) and ok

    async def _turn(self, conn: Conn, job: JobSpec, probe: Probe) -> Turn | None:
        """The job's turn in the next joint claim, when one of its cursors may be due (the
        probe says so, or first sight has just written them)."""
        known, written = await self.sightings.see(conn, job, probe.now)
        if not (written or probe.cursors_due(job.name, job.schedule_delay)):
            return None
        share = self._free_for(job)
        if share <= 0:  # its due cursors wait for a slot within its share
            self._leases.note_backlog()
            return None
        return Turn(job, known, min(share, self._claim_sizes.get(job.name, FIRST_CLAIM)))

    def _free_for(self, job: JobSpec) -> int:
        """The free slots ``job`` may take: within its fair share while other jobs of its
        priority have due work."""
        contenders = self._due_of_priority[job.priority] + (job.name not in self._due)
        return self._leases.free_for(job.name, contenders)

    async def _claim_jointly(
        self, conn: Conn, turns: list[Turn], probe: Probe, stopping: asyncio.Event
    ) -> bool:
        """The joint claim of ``turns``; a job whose take came back full claims on alone.
        Should it fail for another reason than the connection, each job claims alone (one
        bad job must not hold up the others)."""
        if not turns or stopping.is_set():
            return True
        free = self._leases.free
        if free <= 0:  # the due cursors wait for a slot (the backlog wakes the loop)
            self._leases.note_backlog()
            return True
        try:
            claimed_by_job = await self._joint.claim(conn, turns, free, probe.now)
            # The other replicas claimed meanwhile: the jobs after these are probed again
            # rather than claimed on a probe that still shows the plans they took due.
            self.prober.expire()
        except Exception as exc:
            if conn.broken or unavailable(exc):  # the whole tick fails: no use going on
                raise
            self._recorder.log.warning("joint_claim_error", error=describe_error(exc))
            claimed_by_job = {}
        ok = True
        for turn in turns:
            claimed = claimed_by_job.get(turn.job.name)
            if claimed is not None:
                await self._started(conn, turn.job, claimed, turn.most)
            if claimed is None or claimed.again:
                ok = await self._visit_alone(conn, turn.job, probe, stopping, turn.known) and ok
        return ok

    async def _visit_alone(
        self,
        conn: Conn,
        job: JobSpec,
        probe: Probe,
        stopping: asyncio.Event,
        known: Known | None = None,
    ) -> bool:
        """Claim and start ``job``'s work in transactions of its own: a large fan-out takes
        several, one claim each, so replicas take turns and the first handlers start early.
        ``known``: the job's scopes, seen this tick for a joint claim that came back full or
        failed (its cursors are due). False when the job's claim failed."""
        first, due = known is None, known is not None
        while not stopping.is_set():
            # A batch job's slot takes a batch: its claims take as many whole batches as a
            # claim may (sharing a fan-out between replicas is done by the batch).
            if job.batch_size is None:
                per_slot, most = 1, self._claim_sizes.get(job.name, FIRST_CLAIM)
            else:
                per_slot = job.batch_size
                most = BATCH_JOB_CLAIM // per_slot * per_slot
            try:
                if first and not job.dynamic:
                    known, due = await self.sightings.see(conn, job, probe.now)
                free = self._free_for(job) * per_slot
                claimed = await self._claimer.claim(
                    conn, job, probe, free, first, due=due and free > 0, known=known, most=most
                )
            except Exception as exc:
                return self._failed(conn, job, exc)
            await self._started(conn, job, claimed, most)
            if not claimed.again:
                break
            first, due = False, True
        return True

    def _failed(self, conn: Conn, job: JobSpec, exc: Exception) -> bool:
        """A job's sight or claim failed: the tick goes on without it (False), unless the
        connection is lost (raised: the whole tick fails, no use going on)."""
        self.sightings.forget(job.name)  # its scopes may not have been written
        if conn.broken or unavailable(exc):
            raise exc
        self._recorder.error("tick_error", job=job.name, error=describe_error(exc))
        return False

    async def _started(self, conn: Conn, job: JobSpec, claimed: Claimed, size: int) -> None:
        """Start the claims taken right after their commit (the next job or claim sees the
        slots taken, and no later failure can orphan them), oldest plan first so chained
        plans of one scope run in plan order; then keep the job's claim size (``size``:
        the one this claim had)."""
        if claimed.backlog:
            self._leases.note_backlog()
        traced, now = recording(), time.monotonic()
        started: list[tuple[Lease, Claim]] = []
        claims = sorted(claimed.claims, key=lambda c: c.plan_time)
        step = job.batch_size or 1
        for first in range(0, len(claims), step):
            leases = [
                open_lease(job, claim, self._runner, self._recorder.log, now)
                for claim in claims[first : first + step]
            ]
            self._leases.hold(leases)
            started += zip(leases, claims[first : first + step], strict=True)
            self._executor.start(leases, traced)
        if started:
            self._recorder.claimed(job.name, started)
        await self._figures.after_claim(conn, claimed.claims)
        more = claimed.again or claimed.backlog
        self._claim_sizes[job.name] = min(2 * size, CLAIM_LIMIT) if more else FIRST_CLAIM


def due_jobs(jobs: Mapping[str, JobSpec], probe: Probe) -> frozenset[str]:
    """The jobs with work due at ``probe``: cursors or schedules due, retries, PENDING runs
    or stale leases to close (paused ones aside)."""
    waiting = probe.retry | probe.pending | probe.stale_jobs
    return frozenset(
        name
        for name, job in jobs.items()
        if name not in probe.paused
        and (name in waiting or probe.cursors_due(name, job.schedule_delay))
    )
