"""The joint claim: the due cursors of several jobs claimed in one transaction, two statements
and a commit in all. The entries of a beat_schedule are each a job, and many fall due at the
same instant; claimed one transaction each, a replica would publish the last of them only
after hundreds of round trips. Only a job whose claim would be the plain one takes part
(:func:`joins`); the others keep their own transaction (``claims.Claimer``). Owns no state
between calls.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from .._jobs.spec import JobSpec
from .._planning.cursors import CursorDecision, decide_cursors, spec_key
from .._records import DueCursor, JointTerms, Probe
from .._storage.statements import Conn
from .._structures import Scope
from .claims import CLAIM_LIMIT
from .transactions import ClaimTransactions
from .values import Claim, Claimed, Unmoved


@dataclass(frozen=True, slots=True)
class Turn:
    """A job's turn in a joint claim: its scopes by key (the handler gets the job's own
    ``Scope``) and the most due plans its claim takes this time."""

    job: JobSpec
    known: Mapping[tuple[str, str], Scope]
    most: int

    @property
    def cursors(self) -> int:
        """The most due cursors this turn may read."""
        return max(1, min(self.most, len(self.known)))


def joins(job: JobSpec, probe: Probe) -> bool:
    """Whether ``job``'s claim this tick may be part of a joint claim: a code-defined job
    (cursors, not stored schedules) of single runs without max_running (its claim lock),
    with no stale lease to close nor row to take over."""
    return not (
        job.dynamic
        or job.batch_size is not None  # its claims take whole batches
        or job.max_running is not None
        or job.name in probe.stale_jobs
        or job.name in probe.retry
        or job.name in probe.pending
    )


class JointClaimer:
    """Joint claims for one replica (``runner``)."""

    def __init__(self, transactions: ClaimTransactions) -> None:
        self._tx = transactions
        self._claims, self._skips = transactions.claims, transactions.skips

    async def claim(
        self, conn: Conn, turns: Sequence[Turn], free: int, clock: datetime
    ) -> dict[str, Claimed]:
        """Claim the due plans of the ``turns``' jobs in one transaction, in their order, at
        most ``free`` in all (``clock``: the tick's): each job's take, as its own claim
        would have made it."""
        jobs = [turn.job.name for turn in turns]
        return await self._tx.ended(jobs, self._transaction(conn, turns, free, clock), joint=True)

    async def _transaction(
        self, conn: Conn, turns: Sequence[Turn], free: int, clock: datetime
    ) -> dict[str, Claimed]:
        claimed_by_job = {turn.job.name: Claimed() for turn in turns}
        terms = [_terms(turn, free) for turn in turns]
        async with self._tx.begin(conn):
            read: dict[str, list[DueCursor]] = {}
            for row in await self._claims.due_cursors_of_jobs(conn, terms, clock):
                read.setdefault(row.job, []).append(row)
            decided = self._decide(turns, read, free)
            moves = {
                name: [(d.move, cursor.tid) for d, cursor in part.pairs]
                for name, part in decided.items()
                if part.pairs
            }
            # A read that found nothing (other replicas took the cursors): no second statement.
            won, unmoved = (
                await self._claims.claim_cursors_of_jobs(conn, self._tx.runner, terms, clock, moves)
                if moves
                else ([], 0)
            )
            if unmoved:
                raise Unmoved(unmoved)
            known = {turn.job.name: turn for turn in turns}
            for plan in won:
                turn = known[plan.job]
                scope = turn.known.get((plan.scope_kind, plan.scope_id))
                claimed_by_job[plan.job].claims.append(
                    Claim.first(plan, turn.job.max_attempts, scope)
                )
            for term in terms:
                part, count = decided[term.job], len(read.get(term.job, ()))
                await self._settle(conn, claimed_by_job[term.job], term, part, count)
        return claimed_by_job

    def _decide(
        self, turns: Sequence[Turn], read: Mapping[str, Sequence[DueCursor]], free: int
    ) -> dict[str, _Decided]:
        """Each job's decisions for the cursors read, paired with them, taking the free
        slots in the turns' order (a job past them decides nothing: its cursors wait)."""
        room = free
        out: dict[str, _Decided] = {}
        for turn in turns:
            cursors = read.get(turn.job.name, ())
            size = min(room, turn.most, CLAIM_LIMIT)
            decisions = (
                decide_cursors(turn.job, cursors, cursors[0].now, self._tx.lookback, size)
                if cursors and size > 0
                else []
            )
            out[turn.job.name] = _Decided(list(zip(decisions, cursors, strict=False)), room)
            room -= sum(d.claims for d in decisions)
        return out

    async def _settle(
        self, conn: Conn, claimed: Claimed, term: JointTerms, decided: _Decided, read: int
    ) -> None:
        """Record what the job's decisions skipped (in the transaction) and set its claim's
        flags as the job's own claim would: ``again`` when its read was full (or the
        decisions stopped short of it) and free slots were left past it, ``backlog`` when
        plans were left or lost to another claim."""
        pairs = decided.pairs
        skips = [s for d, _ in pairs for s in d.skips]
        if skips:
            await self._skips.record_skips(conn, term.job, skips)
            for skip in skips:
                claimed.skipped[skip.reason] = claimed.skipped.get(skip.reason, 0) + skip.plans
        wanted = sum(d.claims for d, _ in pairs)
        claimed.conflicts += max(0, wanted - len(claimed.claims))
        full = read >= term.limit or len(pairs) < read
        claimed.again = full and term.limit < decided.room
        claimed.backlog = full or wanted > len(claimed.claims)


@dataclass(frozen=True, slots=True)
class _Decided:
    """One job's part of a joint claim's decisions: each with the cursor it is for, and the
    free slots left when the job's turn came."""

    pairs: list[tuple[CursorDecision, DueCursor]]
    room: int


def _terms(turn: Turn, free: int) -> JointTerms:
    job = turn.job
    return JointTerms(
        job=job.name,
        delay=job.schedule_delay,
        limit=max(1, min(turn.most, free, CLAIM_LIMIT)),
        spec=spec_key(job.recurrence),
        max_attempts=job.max_attempts,
        stale_timeout=job.stale_timeout,
        forbid=job.overlap == "forbid",
    )
