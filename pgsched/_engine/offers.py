"""The offer planner: which plans and scopes a job offers the claim statement at the database's
now. Owns each job's memo (plan cursor, the last settled plan, the chunks of a large fan-out
that may still lack a row, the late plans already counted), applies jitter, evaluates scopes,
counts skipped plans, and says when the next plan falls due. Pure planning on top of
``_planning``: no SQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .._config import JobSpec, evaluate_scopes
from .._model import Scope
from .._planning.recurrence import PlanCursor, count_plans_between, jitter_offset
from .._results import describe_error
from .recorder import Recorder
from .values import Offer

# A claim of one plan for more scopes than this looks at them this many at a time, so its
# cost follows the rows it can claim, not the size of the fan-out.
CLAIM_CHUNK = 1_000
_SKIP_COUNT_CAP = 10_000


@dataclass
class _JobMemo:
    cursor: PlanCursor
    settled_plan: datetime | None = None
    settled_scopes: object = None
    late_counted: datetime | None = None
    # The offer whose chunks are being claimed: its plans, its scopes, the chunks left.
    chunk_plans: list[datetime] = field(default_factory=list)
    chunk_scopes: object = None
    chunks: list[int] = field(default_factory=list)


class OfferPlanner:
    """Per-job offers for one replica."""

    def __init__(self, recorder: Recorder, runner_id: str) -> None:
        self._recorder = recorder
        self._memos: dict[str, _JobMemo] = {}
        # Each replica walks a fan-out (its chunks, and the scopes within each) from its own
        # starting point, so replicas claiming at once mostly work on different scopes.
        digest = hashlib.blake2b(runner_id.encode(), digest_size=8).digest()
        self._walk_from = int.from_bytes(digest, "big")

    def _memo(self, job: JobSpec) -> _JobMemo:
        memo = self._memos.get(job.name)
        if memo is None:
            memo = self._memos[job.name] = _JobMemo(job.new_cursor())
        return memo

    async def offer(self, job: JobSpec, now: datetime) -> Offer | None:
        """What ``job`` may claim at ``now`` (the database's clock), or None when nothing is
        new: no plan due, or the newest due plan already settled for the same scopes."""
        memo = self._memo(job)
        due = memo.cursor.due(now)
        if due.late:
            self._count_late(job, memo, due.late)
        if not due.plans:
            return None
        scopes = await self._scopes(job, now)
        if scopes is None:
            return None
        newest = due.plans[-1]
        if memo.settled_plan == newest and _same(memo.settled_scopes, scopes):
            return None
        ready_all = True
        if job.jitter > timedelta(0):
            ready = _past_jitter(job, scopes, newest, now)
            ready_all = all(ready)
            if len(due.plans) == 1:
                scopes = [s for s, ok in zip(scopes, ready, strict=True) if ok]
                if not scopes:
                    return None
            # With several due plans only the newest can still be inside its jitter; older
            # ones are offered to every scope.
        return self._chunked(memo, list(due.plans), scopes, ready_all)

    def _chunked(
        self, memo: _JobMemo, plans: list[datetime], scopes: Sequence[Scope], settle: bool
    ) -> Offer | None:
        # Several plans are claimed oldest first across every scope, so in one statement.
        chunk = CLAIM_CHUNK if len(plans) == 1 else max(1, len(scopes))
        if memo.chunk_plans != plans or not _same(memo.chunk_scopes, scopes):
            memo.chunk_plans, memo.chunk_scopes = plans, scopes
            starts = list(range(0, len(scopes), chunk))
            first = self._walk_from % len(starts) if starts else 0
            memo.chunks = starts[first:] + starts[:first]
        if not memo.chunks:
            return None
        return Offer(plans, scopes, list(memo.chunks), chunk, settle, self._walk_from)

    def settled(self, job: JobSpec, offer: Offer, unsettled: list[int]) -> None:
        """The claim of ``offer`` left ``unsettled`` chunks (rows left beyond the free slots,
        or blocked by overlap); the others have a row for every plan and never need another
        look (rows never go away)."""
        memo = self._memo(job)
        memo.chunks = unsettled
        if not unsettled and offer.settle:
            memo.settled_plan, memo.settled_scopes = offer.plans[-1], offer.scopes

    def forget(self, job: str) -> None:
        """The job's claim transaction failed: what it claimed was rolled back."""
        memo = self._memos.get(job)
        if memo is not None:
            memo.settled_plan = None
            memo.chunk_plans, memo.chunks = [], []

    def count_superseded(self, job: JobSpec, pairs: Iterable[tuple[datetime, datetime]]) -> None:
        """Count the plans skipped between each (previous plan, claimed plan) pair."""
        memo: dict[tuple[datetime, datetime], int] = {}
        skipped = 0
        for key in pairs:
            if key not in memo:
                memo[key] = count_plans_between(job.schedule, key[0], key[1], _SKIP_COUNT_CAP)
            skipped += memo[key]
        if skipped:
            self._recorder.skipped(job.name, "superseded", skipped)

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
            self._recorder.skipped(job.name, "max_lateness", len(fresh))

    async def _scopes(self, job: JobSpec, now: datetime) -> Sequence[Scope] | None:
        try:
            return await evaluate_scopes(job, now)
        except Exception as exc:
            self._recorder.error("scopes_error", job=job.name, error=describe_error(exc))
            return None

    def next_due(self, jobs: Mapping[str, JobSpec], now: datetime) -> timedelta | None:
        """How long after ``now`` the next plan of any job falls due (None: none known)."""
        soonest: timedelta | None = None
        for job in jobs.values():
            memo = self._memos.get(job.name)
            nxt = memo.cursor.next_plan if memo is not None else None
            if nxt is None:
                continue
            wait = nxt + job.schedule_delay - now
            if wait > timedelta(0) and (soonest is None or wait < soonest):
                soonest = wait
        return soonest


def _same(a: object, b: object) -> bool:
    return a is b or a == b


def _past_jitter(
    job: JobSpec, scopes: Sequence[Scope], plan: datetime, now: datetime
) -> list[bool]:
    start_at = plan + job.schedule_delay
    return [
        now >= start_at + jitter_offset(job.name, s.kind, s.id, plan, job.jitter) for s in scopes
    ]
