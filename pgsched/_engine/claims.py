"""The claimer: one job's claim transaction. Closes out stale leases that must not be re-entered,
takes over stale, retryable and PENDING rows, and inserts RUNNING rows for the offered plans,
never more than the replica's free slots. Returns typed :class:`Claim` values; owns no state
between calls (what is settled is the offer planner's to remember).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

import psycopg

from .._config import JobSpec
from .._model import Scope
from .._planning.dynamic import decide
from .._records import ClaimTerms, NewPlans, Probe, Row
from .._storage.store import Conn, ScheduleStore, Store
from .._views import trusted_scope
from .recorder import Recorder
from .values import Claim, ClaimBatch, ClaimKind, Offer

# New plans of one due instant are claimed at most this many per transaction, so the first
# handlers start early and no transaction holds many rows for long.
CLAIM_BATCH = 1_000
# The server ends a claim transaction left idle this long (a replica cut off mid-claim),
# releasing the rows it inserted. Its statements take milliseconds, but between two of them
# the replica's event loop runs whatever else is ready - a thousand handlers just started by
# the previous batch, on a busy machine - so the gap is the loop's latency: seconds under
# load (1 s ended healthy claims). Half of health_timeout's default.
CLAIM_IDLE_TIMEOUT = timedelta(seconds=10)
# Another replica's claim of the same keys waits at most this long for such a transaction
# (its insert waits for the other's rows to commit or vanish); then it gives up for this
# tick, well inside the engine's answer_timeout.
CLAIM_LOCK_TIMEOUT = timedelta(seconds=2)
# Due schedules locked per dynamic claim: bounds the Python work between its statements.
DYNAMIC_BATCH = 1_000
_KIND_OF = {"RUNNING": "stole", "FAILED": "retry"}


class Claimer:
    """Claims for one replica (``runner``)."""

    def __init__(
        self, store: Store, runner: str, recorder: Recorder, *, synchronous: bool = False
    ) -> None:
        self._store, self._runner, self._recorder = store, runner, recorder
        # Every claim (new rows, steals, retries, PENDING take-overs, dynamic schedules) is in
        # the one transaction claim_begin opens: with this, it waits for a synchronous standby.
        self._synchronous = synchronous
        self._schedules = ScheduleStore(store.schema)

    async def claim(
        self, conn: Conn, job: JobSpec, probe: Probe, offer: Offer | None, free: int, first: bool
    ) -> ClaimBatch:
        """Claim what ``job`` may claim now, in one transaction. Only the ``first`` call of a
        tick closes out stale leases and takes over existing rows."""
        close_stale = first and job.name in probe.stale_jobs
        existing = (
            first
            and free > 0
            and (close_stale or job.name in probe.retry or job.name in probe.pending)
        )
        dynamic = job.dynamic and probe.schedules_due(job.name, job.schedule_delay)
        batch = ClaimBatch()
        if not (close_stale or existing or offer or dynamic):
            return batch
        try:
            await self._transaction(conn, job, offer, batch, free, (close_stale, existing, dynamic))
        except psycopg.errors.LockNotAvailable:  # rolled back: the plans wait for a tick
            self._recorder.claim_blocked(job.name, CLAIM_LOCK_TIMEOUT.total_seconds())
            return ClaimBatch(backlog=True)
        return batch

    async def _transaction(
        self,
        conn: Conn,
        job: JobSpec,
        offer: Offer | None,
        batch: ClaimBatch,
        free: int,
        parts: tuple[bool, bool, bool],
    ) -> None:
        """The claim transaction, filling ``batch``; ``parts``: whether it closes out stale
        leases, takes over existing rows, claims due stored schedules."""
        close_stale, existing, dynamic = parts
        async with conn.transaction():
            await self._store.claim_begin(
                conn, CLAIM_IDLE_TIMEOUT, CLAIM_LOCK_TIMEOUT, synchronous=self._synchronous
            )
            cap = await self._cap(conn, job, free)
            if cap is None:  # another replica is claiming this max_running job right now
                self._recorder.lock_busy(job.name)
                batch.backlog = offer is not None or dynamic
                return
            if close_stale:
                for row in await self._store.close_stale(
                    conn, job.name, reentry=job.allow_stale_reentry
                ):
                    self._recorder.stale_closed(job.name, row)
            if existing and cap > 0:
                taken = await self._existing(conn, job, cap)
                batch.claims.extend(taken)
                cap -= len(taken)
            if offer is not None and cap > 0:
                size = min(cap, CLAIM_BATCH) if len(offer.plans) == 1 else cap
                won, batch.unsettled = await self._new(conn, job, offer, size)
                batch.claims.extend(won)
                batch.again = size < cap and len(won) >= size
                batch.backlog = bool(batch.unsettled)
            elif offer is not None:
                batch.backlog = True
            if dynamic:
                await self._dynamic(conn, job, cap, batch)

    async def _dynamic(self, conn: Conn, job: JobSpec, cap: int, batch: ClaimBatch) -> None:
        """Claim the due schedules of a dynamic job (at most ``cap`` rows, a batch at a
        time) and move each one's next plan on, in the claim transaction. ``cap`` is what
        the rows taken over earlier in this transaction left."""
        if cap <= 0:
            batch.backlog = True
            return
        size = min(cap, DYNAMIC_BATCH)
        terms = self._terms(job)
        rows = await self._schedules.due_schedules(conn, terms, job.schedule_delay, size)
        if not rows:
            return
        decisions = [decide(job, row, row["now"]) for row in rows]
        superseded = sum(d.superseded for d in decisions)
        late = sum(d.late for d in decisions)
        if superseded:
            self._recorder.skipped(job.name, "superseded", superseded)
        if late:
            self._recorder.skipped(job.name, "max_lateness", late)
        moves = [d.move for d in decisions if d.move is not None]
        won = await self._schedules.claim_schedules(conn, terms, moves) if moves else []
        wanted = sum(d.claims for d in decisions)
        if wanted > len(won):
            self._recorder.conflicts(job.name, wanted - len(won))
        batch.claims.extend(_claim(row, "won", None) for row in won)
        full = len(rows) >= size
        batch.again = batch.again or (full and size < cap)
        batch.backlog = batch.backlog or full or wanted > len(won)

    async def _cap(self, conn: Conn, job: JobSpec, free: int) -> int | None:
        """How many rows this claim may take: the free slots, and for a ``max_running`` job
        what its cap leaves (under its claim lock; None when another replica holds it)."""
        if job.max_running is None:
            return free
        if not await self._store.try_lock_job(conn, job.name):
            return None
        return min(free, job.max_running - await self._store.running_count(conn, job.name))

    def _terms(self, job: JobSpec) -> ClaimTerms:
        return ClaimTerms(
            job=job.name,
            runner=self._runner,
            stale_timeout=job.stale_timeout,
            reentry=job.allow_stale_reentry,
            forbid=job.overlap == "forbid",
            max_attempts=job.max_attempts,
        )

    async def _existing(self, conn: Conn, job: JobSpec, cap: int) -> list[Claim]:
        try:
            async with conn.transaction():  # a savepoint
                rows = await self._store.claim_existing(conn, self._terms(job), cap)
        except psycopg.errors.UniqueViolation:
            # overlap="forbid": a concurrent claimer started an execution of the same scope
            # first; these rows wait for the next tick.
            self._recorder.conflicts(job.name, 1)
            return []
        return [
            _claim(row, _KIND_OF.get(row["previous_status"], "won"), None)  # type: ignore[arg-type]
            for row in rows
        ]

    async def _new(
        self, conn: Conn, job: JobSpec, offer: Offer, cap: int
    ) -> tuple[list[Claim], list[int]]:
        """Claim ``offer`` chunk by chunk up to ``cap`` rows; returns the claims and the
        chunks that may still lack rows."""
        claims: list[Claim] = []
        unsettled: list[int] = []
        for start, scopes in offer.parts():
            if cap <= 0:
                unsettled.append(start)
                continue
            shift = offer.walk_from % len(scopes)
            won, settled = await self._chunk(conn, job, offer.plans, scopes, cap, shift)
            claims.extend(won)
            cap -= len(won)
            if not settled:  # rows left beyond the free slots, or blocked by overlap
                unsettled.append(start)
        return claims, unsettled

    async def _chunk(
        self,
        conn: Conn,
        job: JobSpec,
        plans: list[datetime],
        scopes: Sequence[Scope],
        cap: int,
        shift: int,
    ) -> tuple[list[Claim], bool]:
        """One claim statement; returns the claims and whether every candidate now has a
        row (nothing is left to claim for these scopes and plans)."""
        offer = NewPlans(
            kinds=[s.kind for s in scopes],
            ids=[s.id for s in scopes],
            plans=plans,
            per_scope=job.max_plans_per_tick,
            after_latest=job.catch_up == "every_plan",
            shift=shift,
        )
        result = await self._store.claim_new(conn, self._terms(job), offer, cap)
        won = len(result.rows)
        if result.picked > won:
            self._recorder.conflicts(job.name, result.picked - won)
        known = {(s.kind, s.id): s for s in scopes} if result.rows else {}
        claims = [_claim(row, "won", known) for row in result.rows]
        return claims, result.remaining <= won


def _claim(row: Row, kind: ClaimKind, known: dict[tuple[str, str], Scope] | None) -> Claim:
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
        previous_plan=row.get("previous_plan"),
        payload=row.get("payload"),
    )


def superseded_pairs(claims: Iterable[Claim]) -> list[tuple[datetime, datetime]]:
    """(previous plan, claimed plan) of new scheduled claims that skipped plans in between."""
    return [
        (c.previous_plan, c.plan_time)
        for c in claims
        if c.kind == "won" and c.trigger == "schedule" and c.previous_plan is not None
    ]
