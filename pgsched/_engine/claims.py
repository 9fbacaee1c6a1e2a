"""The claimer: one job's claim transaction. Closes out stale leases that must not be re-entered,
takes over stale, retryable and PENDING rows, and claims the plans of the job's due cursors
(a code-defined job's, or a dynamic job's stored schedules), never more than the replica's
free slots. Returns typed :class:`Claim` values; owns no state between calls (the cursors in
the database are where each scope is).
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import psycopg

from .._jobs.spec import JobSpec
from .._planning.cursors import CursorDecision, decide_cursors, spec_key
from .._planning.dynamic import Decision, decide_schedules
from .._records import ClaimTerms, DueCursor, DueSchedule, Probe, Row
from .._storage.schedules import ScheduleStore
from .._storage.statements import Conn
from .._structures import Scope, trusted_scope
from .transactions import ClaimTransactions
from .values import Claim, Claimed, ClaimKind, Unmoved

# Due cursors are claimed at most this many per transaction (the free slots bound it first,
# often), so no claim statement runs long enough to near the engine's answer timeout on a
# loaded server and the Python work between its two statements stays bounded. Not fewer:
# each claim's round trips wait behind the handlers the previous claim started, so smaller
# claims made a large fan-out slower (docs/performance.md, "Measured reasons in the code").
CLAIM_LIMIT = 2_000
# A batch job's claims take up to this many: whole batches of a job whose per-run cost is
# small (one handler call for many runs), so the claim's round trips are what a fan-out waits
# for (docs/batches.md).
BATCH_JOB_CLAIM = 5_000
# A job's claims take at most this many due plans once a fan-out is drained, and twice as
# many each time one comes back full, up to CLAIM_LIMIT (the runtime keeps the size per job):
# replicas that woke for the same plans share a small fan-out (one replica claiming all 200
# scopes of a plan ran them one after another while the others found nothing).
FIRST_CLAIM = 64
# Under overlap="forbid" a claim of existing rows (retries, PENDING runs, steals) holds a lock
# per scope until it commits, in PostgreSQL's shared lock table (64 entries per connection by
# default, shared by every session of the server): a retry storm of every scope at once is
# taken this many scopes per claim, so eight replicas claiming together fill at most 4,000.
EXISTING_SCOPE_LOCKS = 500
_KIND_OF = {"RUNNING": "stole", "FAILED": "retry"}
Known = Mapping[tuple[str, str], Scope]


@dataclass(frozen=True, slots=True)
class ClaimParts:
    """What one job's claim transaction does this time: close out stale leases, take over
    existing rows (steals, retries, PENDING runs), claim due cursors, within ``free`` slots
    and ``most`` due plans. Only the first claim of a tick closes and takes over."""

    close_stale: bool
    existing: bool
    cursors: bool
    waiting: bool  # cursors are due but no slot is free
    free: int
    most: int

    @classmethod
    def of(
        cls, job: JobSpec, probe: Probe, free: int, *, first: bool, due: bool, most: int
    ) -> ClaimParts:
        close_stale = first and job.name in probe.stale_jobs
        takes_over = close_stale or job.name in probe.retry or job.name in probe.pending
        cursors = due or probe.cursors_due(job.name, job.schedule_delay)
        return cls(
            close_stale=close_stale,
            existing=first and free > 0 and takes_over,
            cursors=cursors and free > 0,
            waiting=cursors and free <= 0,
            free=free,
            most=most,
        )

    def __bool__(self) -> bool:
        return self.close_stale or self.existing or self.cursors


class Claimer:
    """Claims for one replica (``runner``)."""

    def __init__(self, transactions: ClaimTransactions) -> None:
        self._tx = transactions
        self._claims, self._skips = transactions.claims, transactions.skips
        self._schedules = ScheduleStore(transactions.claims.schema)
        self._runner = transactions.runner
        # where this replica's claim order starts when it is not among the live replicas yet
        self._start = zlib.crc32(transactions.runner.encode())

    def order(self, jobs: Iterable[JobSpec], replicas: Sequence[str] = ()) -> list[JobSpec]:
        """The order this replica claims ``jobs`` in each tick: higher priority first; jobs of
        one priority in name order, started at a place of this replica's own: its rank among
        the live ``replicas`` spaces the places evenly (else one of its runner id's). Replicas
        that woke for the same plans of many jobs (the entries of a beat_schedule) then each
        start on a share of their own instead of queueing behind each other's claims."""
        ranked = sorted(jobs, key=lambda j: (-j.priority, j.name))
        ordered: list[JobSpec] = []
        for _, group in itertools.groupby(ranked, key=lambda j: j.priority):
            same = list(group)
            start = self._place(len(same), replicas)
            ordered += same[start:] + same[:start]
        return ordered

    def _place(self, count: int, replicas: Sequence[str]) -> int:
        if self._runner in replicas:
            return replicas.index(self._runner) * count // len(replicas)
        return self._start % count

    async def claim(
        self,
        conn: Conn,
        job: JobSpec,
        probe: Probe,
        free: int,
        first: bool,
        *,
        due: bool = False,
        known: Known | None = None,
        most: int = CLAIM_LIMIT,
    ) -> Claimed:
        """Claim what ``job`` may claim now, in one transaction. Only the ``first`` call of a
        tick closes out stale leases and takes over existing rows. ``due``: a cursor may be
        due though the probe did not say so (just written, or a full claim before);
        ``known``: the job's scopes by key, so a claim carries the job's own ``Scope``;
        ``most``: at most this many due plans (``claimed.again`` says when more may wait)."""
        parts = ClaimParts.of(job, probe, free, first=first, due=due, most=most)
        # No free slot: the due cursors wait for one (the backlog wakes the loop when one
        # frees) without a transaction that could claim nothing.
        claimed = Claimed(backlog=parts.waiting)
        if not parts:
            return claimed
        terms = self._terms(job, probe.now)
        claiming = self._transaction(conn, terms, job, claimed, parts, known)
        return (await self._tx.ended([job.name], claiming, joint=False))[job.name]

    async def _transaction(
        self,
        conn: Conn,
        terms: ClaimTerms,
        job: JobSpec,
        claimed: Claimed,
        parts: ClaimParts,
        known: Known | None,
    ) -> dict[str, Claimed]:
        """The claim transaction of ``parts``, filling ``claimed`` (the job's)."""
        async with self._tx.begin(conn):
            cap = await self._cap(conn, job, parts.free)
            if cap is None:  # another replica is claiming this max_running job right now
                self._tx.recorder.lock_busy(job.name)
                claimed.backlog = parts.cursors
                return {job.name: claimed}
            if parts.close_stale:
                claimed.closed += await self._claims.close_stale(
                    conn, job.name, reentry=job.allow_stale_reentry
                )
            if parts.existing and cap > 0:
                limit = min(cap, EXISTING_SCOPE_LOCKS) if job.overlap == "forbid" else cap
                taken = await self._existing(conn, terms, limit, claimed)
                claimed.claims.extend(taken)
                capped = limit < cap and len(taken) >= limit  # more may wait: claim again soon
                claimed.backlog = claimed.backlog or capped
                cap -= len(taken)
            if parts.cursors:
                await self._cursors(conn, terms, job, cap, parts.most, claimed, known)
        return {job.name: claimed}

    async def _cursors(
        self,
        conn: Conn,
        terms: ClaimTerms,
        job: JobSpec,
        cap: int,
        most: int,
        claimed: Claimed,
        known: Known | None,
    ) -> None:
        """Claim the plans of the job's due cursors (at most ``most`` and ``cap`` rows) and
        move each cursor on, in the claim transaction. ``cap`` is what the rows taken over
        earlier in this transaction left of the free slots."""
        if cap <= 0:
            claimed.backlog = True
            return
        size = min(cap, most, CLAIM_LIMIT if job.batch_size is None else BATCH_JOB_CLAIM)
        rows: Sequence[DueSchedule | DueCursor]
        if job.dynamic:
            rows = schedules = await self._schedules.due_schedules(
                conn, terms, job.schedule_delay, size
            )
            decisions: Sequence[Decision | CursorDecision] = (
                decide_schedules(job, schedules, schedules[0].now) if schedules else []
            )
        else:
            rows = cursors = await self._claims.due_cursors(conn, terms, job.schedule_delay, size)
            decisions = (
                decide_cursors(job, cursors, cursors[0].now, self._tx.lookback, size)
                if cursors
                else []
            )
        read = len(rows)
        if not read:
            return
        tids = {(row.scope_kind, row.scope_id): row.tid for row in rows}
        won = await self._write(conn, job, terms, decisions, (known, tids))
        claimed.claims.extend(won)
        wanted = sum(d.claims for d in decisions)
        # What the decisions skipped, recorded in this transaction: a claim that skipped
        # nothing runs no statement for it.
        skips = [s for d in decisions if d.skips for s in d.skips]
        if skips:
            await self._skips.record_skips(conn, job.name, skips)
            for skip in skips:
                claimed.skipped[skip.reason] = claimed.skipped.get(skip.reason, 0) + skip.plans
        claimed.conflicts += max(0, wanted - len(won))
        full = read >= size or len(decisions) < read
        claimed.again = full and size < cap
        claimed.backlog = claimed.backlog or full or wanted > len(won)

    async def _write(
        self,
        conn: Conn,
        job: JobSpec,
        terms: ClaimTerms,
        decisions: Sequence[Decision | CursorDecision],
        scopes: tuple[Known | None, Mapping[tuple[str, str], str]],
    ) -> list[Claim]:
        """Insert the chosen plans' RUNNING rows and move the cursors on: the claims won.
        ``scopes``: the job's scopes by key, and where the claim read each cursor."""
        known, tids = scopes
        if job.dynamic:
            moves = [d.move for d in decisions if isinstance(d, Decision) and d.move is not None]
            at = [tids[m.kind, m.id] for m in moves]
            won, unmoved = (
                await self._schedules.claim_schedules(conn, terms, moves, at) if moves else ([], 0)
            )
        else:
            cursor_moves = [d.move for d in decisions if isinstance(d, CursorDecision)]
            at = [tids[m.kind, m.id] for m in cursor_moves]
            spec = spec_key(job.recurrence)
            won, unmoved = await self._claims.claim_cursors(conn, terms, spec, cursor_moves, at)
        if unmoved:
            raise Unmoved(unmoved)
        return [
            Claim.first(plan, job.max_attempts, (known or {}).get((plan.scope_kind, plan.scope_id)))
            for plan in won
        ]

    async def _cap(self, conn: Conn, job: JobSpec, free: int) -> int | None:
        """How many rows this claim may take: the free slots, and for a ``max_running`` job
        what its cap leaves (under its claim lock; None when another replica holds it)."""
        if job.max_running is None:
            return free
        if not await self._claims.try_lock_job(conn, job.name):
            return None
        return min(free, job.max_running - await self._claims.running_count(conn, job.name))

    def _terms(self, job: JobSpec, clock: datetime) -> ClaimTerms:
        return ClaimTerms(
            job=job.name,
            runner=self._tx.runner,
            stale_timeout=job.stale_timeout,
            reentry=job.allow_stale_reentry,
            forbid=job.overlap == "forbid",
            max_attempts=job.max_attempts,
            dynamic=job.dynamic,
            clock=clock,
        )

    async def _existing(
        self, conn: Conn, terms: ClaimTerms, cap: int, claimed: Claimed
    ) -> list[Claim]:
        try:
            async with conn.transaction():  # a savepoint
                rows = await self._claims.claim_existing(conn, terms, cap)
        except psycopg.errors.UniqueViolation:
            # A guard only: these updates change no column of a unique index of the
            # partitioned ledger (row and scope locks keep overlap="forbid", migration 0014). Should
            # one be raised, the rows wait for the next tick.
            claimed.conflicts += 1
            return []
        return [
            _claim(row, _KIND_OF.get(row["previous_status"], "won"), None)  # type: ignore[arg-type]
            for row in rows
        ]


def _claim(row: Row, kind: ClaimKind, known: Known | None) -> Claim:
    key = (row["scope_kind"], row["scope_id"])
    scope = (known or {}).get(key) or trusted_scope(*key)
    return Claim(
        kind=kind,
        execution_id=row["id"],
        scope=scope,
        plan_time=row["plan_time"],
        trigger=row.get("trigger", "schedule"),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        lease_token=row["lease_token"],
        fencing_token=row["fencing_token"],
        started_at=row.get("started_at"),
        previous_runner=row.get("previous_runner") if kind == "stole" else None,
        payload=row.get("payload"),
        stolen=row.get("stolen", False),
    )
