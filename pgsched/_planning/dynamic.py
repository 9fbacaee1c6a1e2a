"""Claims of dynamic jobs (docs/schedules.md), the pure part: for each stored schedule the
claim found due, which plan to claim now under the job's catch-up rules and which plan comes
after it. No I/O: the claimer reads the due schedules and writes the claims and moves.

A stored schedule's ``next_plan_time`` is its first plan not yet claimed. When it is due:

- ``latest_only``: the newest plan due now is claimed; the ones between are skipped
  (counted as superseded), as for code-defined jobs.
- ``every_plan``: the oldest plan within ``catch_up_window`` is claimed, then the next one on
  a later claim.
- ``max_lateness``: plans not started within it of their due time are skipped (counted).
- ``jitter``: a plan still inside its scope's jitter is left due, untouched.
- ``starts_at`` / ``ends_at`` (which a put may have changed since ``next_plan_time`` was
  computed) bound every plan chosen; a schedule with no plan left gets None. Due plans from
  the stored next plan up to the first inside the window are skipped (``outside_window``).
- A pause of the job or of the schedule that a resume ended: the plans due in between are
  skipped as ``paused``, as for code-defined jobs.
- Every skipped plan is in a span of the decision (``skips``), which the claim records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from .._records import DueSchedule, ScheduleMove, Skip
from .._times import US
from .calendars import Calendar, skips_excluded
from .recurrence import CatchUp, Recurrence, jitter_offset
from .schedules import ValidSchedule, first_plan_after, recurrence_for, stored_schedule
from .skips import (
    excluded_spans,
    later_window,
    past_pause,
    pause_window,
    rescoped,
    span,
    spans_between,
)


class CatchUpRules(Protocol):
    """What a decision reads of its job (a ``JobSpec``): its name and catch-up options."""

    @property
    def name(self) -> str: ...
    @property
    def catch_up(self) -> CatchUp: ...
    @property
    def catch_up_window(self) -> timedelta: ...
    @property
    def max_lateness(self) -> timedelta | None: ...
    @property
    def schedule_delay(self) -> timedelta: ...
    @property
    def jitter(self) -> timedelta: ...
    @property
    def calendars(self) -> Mapping[str, Calendar]: ...


class Decision(NamedTuple):
    """What the claim does with one due schedule: ``move`` (None: leave it as it is) and the
    spans of plans it skipped (superseded, too late, paused, outside its window)."""

    move: ScheduleMove | None
    skips: tuple[Skip, ...] = ()

    @property
    def claims(self) -> bool:
        return self.move is not None and self.move.plan is not None


def decide_schedules(
    job: CatchUpRules, rows: Sequence[DueSchedule], now: datetime
) -> list[Decision]:
    """The decisions for the due schedules ``rows`` at ``now``, each as :func:`decide` makes
    it alone."""
    if job.jitter > timedelta(0):
        return [decide(job, row, now) for row in rows]
    # Without jitter a decision depends on the schedule's spec, window and next plan, never on
    # its scope: schedules put in bulk share them, and each distinct one is decided once.
    made: dict[tuple[Any, ...], Decision] = {}
    out: list[Decision] = []
    for row in rows:
        key = (
            *row[2:8],  # every_us, cron, timezone, starts_at, ends_at, next_plan_time
            row.calendar,
            row.on_excluded,
            row.created_at,
            row.paused_at,
            row.resumed_at,
            row.own_paused_at,
            row.own_resumed_at,
        )
        shared = made.get(key)
        if shared is None:
            shared = made[key] = decide(job, row, now)
        out.append(_for_scope(shared, row))
    return out


def _for_scope(decision: Decision, row: DueSchedule) -> Decision:
    """``decision``, made for another schedule of the same spec, for ``row``'s scope."""
    move = decision.move
    if move is None or (move.kind, move.id) == (row.scope_kind, row.scope_id):
        return decision
    mine = ScheduleMove(row.scope_kind, row.scope_id, move.plan, move.next_plan)
    skips = rescoped(decision.skips, row.scope_kind, row.scope_id) if decision.skips else ()
    return Decision(mine, skips)


def decide(job: CatchUpRules, row: DueSchedule, now: datetime) -> Decision:
    """The claim of the due schedule ``row`` of ``job`` at ``now`` (the database's clock)."""
    valid = stored_schedule(job.name, row._asdict(), job.calendars)
    recurrence = recurrence_for(valid.spec_key)
    decision = _decided(job, row, now, (valid, recurrence))
    if not skips_excluded(recurrence):
        return decision
    passed = [s.last for s in decision.skips]
    if decision.move is not None and decision.move.plan is not None:
        passed.append(decision.move.plan)
    if not passed:
        return decision
    # The plans its calendar skipped: after the plan before its next one (or its creation).
    after = recurrence.latest_at_or_before(row.next_plan_time - US) or row.created_at
    lower = [t for t in (after, row.created_at, valid.starts_at and valid.starts_at - US) if t]
    if not lower:
        return decision
    excluded = excluded_spans(recurrence, (row.scope_kind, row.scope_id), max(lower), max(passed))
    return decision._replace(skips=(*decision.skips, *excluded)) if excluded else decision


def _decided(
    job: CatchUpRules, row: DueSchedule, now: datetime, schedule: tuple[ValidSchedule, Recurrence]
) -> Decision:
    valid, recurrence = schedule
    kind, ident = row.scope_kind, row.scope_id
    horizon = now - job.schedule_delay
    first = first_plan_after(valid, row.next_plan_time - US)  # the window may have moved
    skips = spans_between(
        recurrence, (kind, ident), "outside_window", row.next_plan_time, _before(first, horizon)
    )
    if first is None or first > horizon:
        return Decision(ScheduleMove(kind, ident, None, first), tuple(skips))
    pause = later_window(
        pause_window(row.paused_at, row.resumed_at),
        pause_window(row.own_paused_at, row.own_resumed_at),
    )
    schedule, scope = (valid, recurrence), (kind, ident)
    if pause is not None and first + job.schedule_delay < pause.end:
        # As for a code-defined job's cursor (cursors._across_pause).
        latest = job.catch_up == "latest_only"
        resumed = first_plan_after(valid, pause.end - job.schedule_delay - US)
        if first + job.schedule_delay < pause.start and (
            not latest or resumed is None or resumed > horizon
        ):
            return _claim(job, schedule, scope, (first, now, pause.start - US), skips)
        step = lambda t: first_plan_after(valid, t)  # noqa: E731
        window = (pause, job.schedule_delay, latest)
        first, paused = past_pause(step, recurrence, scope, first, window)
        skips += paused
        if first is None or first > horizon:
            return Decision(ScheduleMove(kind, ident, None, first), tuple(skips))
    return _claim(job, schedule, scope, (first, now, None), skips)


def _before(first: datetime | None, horizon: datetime) -> datetime:
    """Where the span of due plans outside the window ends (excluded): the first plan inside
    it, or past the last plan due."""
    return horizon + US if first is None else min(first, horizon + US)


def _claim(
    job: CatchUpRules,
    schedule: tuple[ValidSchedule, Recurrence],
    scope: tuple[str, str],
    at: tuple[datetime, datetime, datetime | None],
    skips: list[Skip],
) -> Decision:
    """The decision from ``first``, the schedule's first plan due and not skipped so far;
    ``at``: it, the clock, and the last instant a plan claimed may fall due (None: now)."""
    (valid, recurrence), (kind, ident), (first, now, until) = schedule, scope, at
    horizon = now - job.schedule_delay
    newest = horizon if until is None else min(horizon, until - job.schedule_delay)
    plan, superseded = _pick(job, valid, (first, newest), scope)
    skips += superseded
    if plan is None or plan > newest:
        return Decision(ScheduleMove(kind, ident, None, plan), tuple(skips))
    if job.max_lateness is not None and plan < horizon - job.max_lateness:
        deadline = horizon - job.max_lateness
        if job.catch_up == "latest_only":
            skips.append(span(recurrence, scope, "max_lateness", plan, plan))
            move = ScheduleMove(kind, ident, None, first_plan_after(valid, plan))
            return Decision(move, tuple(skips))
        skips += spans_between(recurrence, scope, "max_lateness", plan, deadline)
        plan = first_plan_after(valid, deadline - US)
        if plan is None or plan > horizon:
            return Decision(ScheduleMove(kind, ident, None, plan), tuple(skips))
    if job.jitter > timedelta(0):
        wait = jitter_offset(job.name, kind, ident, plan, job.jitter)
        if now < plan + job.schedule_delay + wait:
            # Left due as it is: what was skipped is decided again at the next claim.
            return Decision(None)
    move = ScheduleMove(kind, ident, plan, first_plan_after(valid, plan))
    return Decision(move, tuple(skips))


def _pick(
    job: CatchUpRules,
    valid: ValidSchedule,
    due: tuple[datetime, datetime],
    scope: tuple[str, str],
) -> tuple[datetime | None, list[Skip]]:
    """The plan the catch-up mode claims among those due from ``first`` to ``horizon``
    (``due``), and the span of older ones it supersedes."""
    (first, horizon), recurrence = due, recurrence_for(valid.spec_key)
    if job.catch_up == "every_plan":
        oldest = horizon - job.catch_up_window
        if first >= oldest:
            return first, []
        start = first_plan_after(valid, oldest - US)
        return start, spans_between(recurrence, scope, "superseded", first, start or oldest)
    until = horizon if valid.ends_at is None else min(horizon, valid.ends_at - US)
    after_first = first_plan_after(valid, first)  # memoised per spec: one step at most
    if after_first is None or after_first > until:
        return first, []  # the usual case: the stored next plan is the only one due
    plan = recurrence.latest_at_or_before(until)
    if plan is None or plan < first:
        return first, []
    return plan, spans_between(recurrence, scope, "superseded", first, plan)
