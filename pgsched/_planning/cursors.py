"""Claims of code-defined jobs, the pure part: each (job, scope) has a stored cursor (its next
unclaimed plan, when it was first seen, its latest claimed plan); for each cursor the claim
found due, which plans to claim now under the job's catch-up rules and where the cursor goes
next. No I/O: the claimer reads the due cursors and writes the claims and moves.

- First sight: a scope's first plan is the first one due at or after the moment a replica
  first saw it, less one tick interval (a deploy at 09:00:00.3 still runs the 09:00 plan).
- ``latest_only``: the newest plan due now is claimed; the ones between are skipped
  (counted as superseded).
- ``every_plan``: the oldest plans within ``catch_up_window`` are claimed, at most
  ``max_plans_per_tick`` at once (one under ``overlap="forbid"``).
- ``max_lateness``: plans not started within it of their due time are skipped (counted).
- A pause that a resume ended: the plans due in between are skipped as ``paused`` whatever
  the catch-up mode (under ``every_plan`` those due before the pause are claimed first).
- Every skipped plan is in a span of the decision (``skips``), which the claim records;
  with a calendar that skips, the plans it excluded since the scope's latest claimed plan
  too, once the decision passes them (``excluded``).
- ``jitter``: a cursor is due at its plan plus the scope's jitter; a plan still inside it is
  not claimed, and the cursor is moved to that plan, due when its jitter has passed.
- A cursor computed from another recurrence (the job's ``cron`` or ``every`` changed), or
  written by first sight of a scope an earlier version planned, has no ``spec``: its next
  plan is computed again after its latest claimed plan (else from first sight).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple, Protocol

from .._records import CursorMove, DueCursor, Skip
from .._times import US
from .calendars import skips_excluded
from .dynamic import CatchUpRules
from .recurrence import CadenceRecurrence, CronRecurrence, Recurrence, jitter_offset
from .skips import (
    PauseWindow,
    excluded_spans,
    past_pause,
    pause_window,
    rescoped,
    span,
    spans_between,
)


class CursorRules(CatchUpRules, Protocol):
    """What a cursor's decision reads of its job (a ``JobSpec``)."""

    @property
    def recurrence(self) -> Recurrence: ...
    @property
    def max_plans_per_tick(self) -> int: ...
    @property
    def overlap(self) -> str: ...
    @property
    def first_sight(self) -> str: ...


class CursorDecision(NamedTuple):
    """What the claim does with one due cursor: ``move`` (its plans to claim and its next
    plan) and the spans of plans it skipped (superseded, too late, paused)."""

    move: CursorMove
    skips: tuple[Skip, ...] = ()

    @property
    def claims(self) -> int:
        return len(self.move.plans)


def spec_key(recurrence: Recurrence) -> str:
    """What a cursor's next plan was computed from: two keys differ when the plans do."""
    if isinstance(recurrence, CronRecurrence):
        return f"{recurrence.key()} {recurrence.dst_repeated} {recurrence.dst_skipped}"
    return recurrence.key()


def scope_digest(keys: Sequence[tuple[str, str]]) -> str:
    """A digest of a job's scope list (sorted keys): equal on two replicas when they list the
    same scopes."""
    # Fed key by key (the bytes of the keys joined by \x1e): joined first, 100,000 scopes
    # made a list of 100,000 strings and two copies of the text at once.
    digest = hashlib.blake2b(digest_size=16)
    separator = ""
    for kind, id_ in keys:
        digest.update(f"{separator}{kind}\x1f{id_}".encode())
        separator = "\x1e"
    return digest.hexdigest()


def first_plan(job: CursorRules, seen_at: datetime, lookback: timedelta) -> datetime | None:
    """A scope's first plan when first seen at ``seen_at``: the first one due at or after it
    (a plan that fell due within ``lookback``, the tick interval, counts); with the job's
    ``first_sight="latest"``, the newest plan already due, if there is one."""
    horizon = seen_at - job.schedule_delay
    if job.first_sight == "latest":
        latest = job.recurrence.latest_at_or_before(horizon)
        if latest is not None:
            return latest
    return job.recurrence.next_after(horizon - lookback - US)


def due_at(job: CursorRules, kind: str, ident: str, plan: datetime | None) -> datetime | None:
    """When ``plan`` is due for the scope, less ``schedule_delay``: the plan plus its jitter."""
    if plan is None or job.jitter <= timedelta(0):
        return plan  # one object for every scope of the job, not a copy of it each
    return plan + jitter_offset(job.name, kind, ident, plan, job.jitter)


def decide_cursors(
    job: CursorRules, rows: Sequence[DueCursor], now: datetime, lookback: timedelta, room: int
) -> list[CursorDecision]:
    """The decisions for the due cursors ``rows``, claiming at most ``room`` plans in all
    (cursors past that are left as they are, for a later claim)."""
    spec = spec_key(job.recurrence)
    # The cursors of one job mostly share their next plan: its steps are computed once.
    memo = _Memo(job.recurrence) if not isinstance(job.recurrence, CadenceRecurrence) else None
    steps = _Steps(job, memo or job.recurrence)
    # Without jitter, a latest_only decision depends on the cursor's first unclaimed plan
    # alone (never on the scope, nor on room: it claims one plan): made once per plan.
    shared: dict[datetime | None, CursorDecision] | None = (
        {} if job.catch_up == "latest_only" and job.jitter <= timedelta(0) else None
    )
    # The job's pause window: the same on every row (one read of job_state per claim).
    pause = pause_window(rows[0].paused_at, rows[0].resumed_at) if rows else None
    excluded = _Excluded(job, lookback)
    out: list[CursorDecision] = []
    for row in rows:
        if room <= 0:
            break
        kind, ident = row.scope_kind, row.scope_id
        first = _first_unclaimed(steps, spec, row, lookback)
        if shared is None:
            decision = _decide(steps, kind, ident, first, (now, room, pause))
        elif (made := shared.get(first)) is not None:
            decision = _for_scope(made, kind, ident)
        else:
            decision = shared[first] = _decide(steps, kind, ident, first, (now, room, pause))
        room -= decision.claims
        out.append(excluded.added(row, decision))
    return out


def decide_cursor(
    job: CursorRules,
    spec: str,
    row: DueCursor,
    now: datetime,
    lookback: timedelta,
    room: int = 1,
) -> CursorDecision:
    """The claim of the due cursor ``row`` at ``now`` (the database's clock), at most
    ``room`` plans; ``spec`` is the job's :func:`spec_key`."""
    steps = _Steps(job, job.recurrence)
    first = _first_unclaimed(steps, spec, row, lookback)
    pause = pause_window(row.paused_at, row.resumed_at)
    decision = _decide(steps, row.scope_kind, row.scope_id, first, (now, room, pause))
    return _Excluded(job, lookback).added(row, decision)


def _decide(
    steps: _Steps,
    kind: str,
    ident: str,
    first: datetime | None,
    at: tuple[datetime, int, PauseWindow | None],
) -> CursorDecision:
    """``at``: the claim's clock, how many plans it may claim, and the job's last pause."""
    now, room, pause = at
    job = steps.job
    if first is None or first > now - job.schedule_delay:
        return CursorDecision(_wait(steps, kind, ident, first))
    if pause is not None and first + job.schedule_delay < pause.end:
        return _across_pause(steps, kind, ident, first, (now, room, pause))
    return _catch_up(steps, kind, ident, first, (now, room, None))


def _catch_up(
    steps: _Steps, kind: str, ident: str, first: datetime, at: tuple[datetime, int, datetime | None]
) -> CursorDecision:
    """The job's catch-up from ``first``; ``at``: the clock, the room, and the last instant
    a plan it claims may fall due (None: the clock)."""
    if steps.job.catch_up == "latest_only":
        return _latest(steps, kind, ident, first, (at[0], at[2]))
    return _every(steps, kind, ident, first, at)


def _across_pause(
    steps: _Steps, kind: str, ident: str, first: datetime, at: tuple[datetime, int, PauseWindow]
) -> CursorDecision:
    """A cursor whose first plan fell due before a resume: the plans due during the pause
    are skipped (``paused``). Those due before it are decided as if claimed just before it,
    unless latest_only has a plan due since the resume to claim instead (they are then
    superseded)."""
    now, room, pause = at
    job, recurrence = steps.job, steps.recurrence
    horizon = now - job.schedule_delay
    latest = job.catch_up == "latest_only"
    resumed = recurrence.next_after(pause.end - job.schedule_delay - US)
    if first + job.schedule_delay < pause.start and (
        not latest or resumed is None or resumed > horizon
    ):
        return _catch_up(steps, kind, ident, first, (now, room, pause.start - US))
    window = (pause, job.schedule_delay, latest)
    resumed, skips = past_pause(recurrence.next_after, recurrence, (kind, ident), first, window)
    if resumed is None or resumed > horizon:
        return CursorDecision(_wait(steps, kind, ident, resumed), tuple(skips))
    decision = _catch_up(steps, kind, ident, resumed, (now, room, None))
    return decision._replace(skips=(*skips, *decision.skips))


def _for_scope(decision: CursorDecision, kind: str, ident: str) -> CursorDecision:
    """``decision``, made for another scope, for this one (no jitter: nothing differs)."""
    move = decision.move
    return CursorDecision(
        CursorMove(kind, ident, move.plans, move.next_plan, move.due_at),
        rescoped(decision.skips, kind, ident) if decision.skips else (),
    )


def _first_unclaimed(
    steps: _Steps, spec: str, row: DueCursor, lookback: timedelta
) -> datetime | None:
    if row.spec == spec:
        nxt: datetime | None = row.next_plan_time
        return nxt
    last = row.last_plan_time
    if last is not None:
        return steps.recurrence.next_after(last)
    return first_plan(steps.job, row.first_seen_at, lookback)


def _latest(
    steps: _Steps, kind: str, ident: str, first: datetime, at: tuple[datetime, datetime | None]
) -> CursorDecision:
    """``at``: the claim's clock, and the last instant the plan it claims may fall due."""
    (now, until), job, recurrence = at, steps.job, steps.recurrence
    horizon = now - job.schedule_delay
    newest = horizon if until is None else min(horizon, until - job.schedule_delay)
    plan = recurrence.latest_at_or_before(newest)
    if plan is None or plan < first:
        plan = first
    superseded = tuple(spans_between(recurrence, (kind, ident), "superseded", first, plan))
    if job.max_lateness is not None and plan < horizon - job.max_lateness:
        after = recurrence.next_after(plan)
        late = span(recurrence, (kind, ident), "max_lateness", plan, plan)
        return CursorDecision(_wait(steps, kind, ident, after), (*superseded, late))
    if not _ready(job, kind, ident, plan, now):
        # Moved to the plan it will claim, due once its jitter has passed.
        return CursorDecision(_wait(steps, kind, ident, plan), superseded)
    return CursorDecision(_take(steps, kind, ident, [plan]), superseded)


def _every(
    steps: _Steps,
    kind: str,
    ident: str,
    first: datetime,
    at: tuple[datetime, int, datetime | None],
) -> CursorDecision:
    """``at``: the claim's clock, how many plans it may claim, and the last instant a plan it
    claims may fall due (None: the clock)."""
    now, room, until = at
    job, recurrence, scope = steps.job, steps.recurrence, (kind, ident)
    horizon = now - job.schedule_delay
    oldest = horizon - job.catch_up_window
    start: datetime | None = first if first >= oldest else recurrence.next_after(oldest - US)
    # Older than catch_up_window: left for the newer plans, as latest_only leaves them.
    skips = spans_between(recurrence, scope, "superseded", first, start or oldest)
    if start is not None and job.max_lateness is not None:
        deadline = horizon - job.max_lateness
        if start < deadline:
            skips += spans_between(recurrence, scope, "max_lateness", start, deadline)
            start = recurrence.next_after(deadline - US)
    if until is not None:
        horizon = min(horizon, until - job.schedule_delay)
    if start is None or start > horizon:
        return CursorDecision(_wait(steps, kind, ident, start), tuple(skips))
    most = min(room, 1 if job.overlap == "forbid" else job.max_plans_per_tick)
    plans: list[datetime] = []
    nxt: datetime | None = start
    while nxt is not None and nxt <= horizon and len(plans) < most:
        if not _ready(job, kind, ident, nxt, now):
            break
        plans.append(nxt)
        nxt = recurrence.next_after(nxt)
    if not plans:
        return CursorDecision(_wait(steps, kind, ident, start), tuple(skips))
    return CursorDecision(_take(steps, kind, ident, plans), tuple(skips))


def _ready(job: CursorRules, kind: str, ident: str, plan: datetime, now: datetime) -> bool:
    """Whether ``plan`` is past its jitter for the scope at ``now``."""
    if job.jitter <= timedelta(0):
        return True
    return now >= plan + job.schedule_delay + jitter_offset(job.name, kind, ident, plan, job.jitter)


def _wait(steps: _Steps, kind: str, ident: str, plan: datetime | None) -> CursorMove:
    return CursorMove(kind, ident, (), plan, due_at(steps.job, kind, ident, plan))


def _take(steps: _Steps, kind: str, ident: str, plans: list[datetime]) -> CursorMove:
    nxt = steps.recurrence.next_after(plans[-1])
    return CursorMove(kind, ident, tuple(plans), nxt, due_at(steps.job, kind, ident, nxt))


class _Excluded:
    """The plans a job's calendar skipped that a decision passes: those after the scope's
    latest claimed plan (else its first sight) up to the last plan the decision claims or
    skips. A claim's scopes mostly share both bounds: each pair is computed once."""

    def __init__(self, job: CursorRules, lookback: timedelta) -> None:
        self._job, self._lookback = job, lookback
        self._skips = skips_excluded(job.recurrence)
        self._made: dict[tuple[datetime, datetime], list[Skip]] = {}

    def added(self, row: DueCursor, decision: CursorDecision) -> CursorDecision:
        passed = [*decision.move.plans, *(s.last for s in decision.skips)]
        if not self._skips or not passed:
            return decision
        job = self._job
        after = row.last_plan_time or row.first_seen_at - job.schedule_delay - self._lookback
        bounds = (after, max(passed))
        made = self._made.get(bounds)
        if made is None:
            made = self._made[bounds] = excluded_spans(job.recurrence, ("", ""), *bounds)
        if not made:
            return decision
        mine = rescoped(tuple(made), row.scope_kind, row.scope_id)
        return decision._replace(skips=(*decision.skips, *mine))


@dataclass(frozen=True, slots=True)
class _Steps:
    job: CursorRules
    recurrence: Recurrence  # the job's, or a memo of it


class _Memo(Recurrence):
    """A recurrence's answers kept for one claim's decisions (cron steps cost tens of
    microseconds; a claim asks the same ones for every scope)."""

    def __init__(self, inner: Recurrence) -> None:
        self._inner = inner
        self._next: dict[datetime, datetime | None] = {}
        self._latest: dict[datetime, datetime | None] = {}

    def plans_between(self, start: datetime, end: datetime) -> Sequence[datetime]:
        return self._inner.plans_between(start, end)

    def describe(self) -> str:
        return self._inner.describe()

    def key(self) -> str:
        return self._inner.key()

    def next_after(self, t: datetime) -> datetime | None:
        if t not in self._next:
            self._next[t] = self._inner.next_after(t)
        return self._next[t]

    def latest_at_or_before(self, t: datetime) -> datetime | None:
        if t not in self._latest:
            self._latest[t] = self._inner.latest_at_or_before(t)
        return self._latest[t]
