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
  computed) bound every plan chosen; a schedule with no plan left gets None.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple, Protocol

from .._records import DueSchedule, ScheduleMove
from .recurrence import CatchUp, count_plans_between, jitter_offset
from .schedules import (
    ValidSchedule,
    first_plan_after,
    recurrence_for,
    stored_schedule,
)

_US = timedelta(microseconds=1)
_SKIP_COUNT_CAP = 10_000


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


class Decision(NamedTuple):
    """What the claim does with one due schedule: ``move`` (None: leave it as it is) and the
    plans it skipped, superseded or too late."""

    move: ScheduleMove | None
    superseded: int = 0
    late: int = 0

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
        key = (row.every_us, row.cron, row.timezone, row.starts_at, row.ends_at, row.next_plan_time)
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
    return Decision(mine, decision.superseded, decision.late)


def decide(job: CatchUpRules, row: DueSchedule, now: datetime) -> Decision:
    """The claim of the due schedule ``row`` of ``job`` at ``now`` (the database's clock)."""
    valid = stored_schedule(job.name, row._asdict())
    kind, ident = row.scope_kind, row.scope_id
    horizon = now - job.schedule_delay
    first = first_plan_after(valid, row.next_plan_time - _US)  # the window may have moved
    if first is None or first > horizon:
        return Decision(ScheduleMove(kind, ident, None, first))
    plan, superseded = _pick(job, valid, first, horizon)
    if plan is None or plan > horizon:
        return Decision(ScheduleMove(kind, ident, None, plan))
    late = 0
    if job.max_lateness is not None and plan < horizon - job.max_lateness:
        deadline = horizon - job.max_lateness
        if job.catch_up == "latest_only":
            return Decision(ScheduleMove(kind, ident, None, first_plan_after(valid, plan)), 0, 1)
        late = 1 + count_plans_between(
            recurrence_for(valid.spec_key), plan, deadline, _SKIP_COUNT_CAP
        )
        plan = first_plan_after(valid, deadline - _US)
        if plan is None or plan > horizon:
            return Decision(ScheduleMove(kind, ident, None, plan), 0, late)
    if job.jitter > timedelta(0):
        wait = jitter_offset(job.name, kind, ident, plan, job.jitter)
        if now < plan + job.schedule_delay + wait:
            return Decision(None, 0, late)
    return Decision(
        ScheduleMove(kind, ident, plan, first_plan_after(valid, plan)), superseded, late
    )


def _pick(
    job: CatchUpRules, valid: ValidSchedule, first: datetime, horizon: datetime
) -> tuple[datetime | None, int]:
    """The plan the catch-up mode claims among those from ``first`` to ``horizon``, and how
    many older ones it supersedes."""
    if job.catch_up == "every_plan":
        oldest = horizon - job.catch_up_window
        return (first if first >= oldest else first_plan_after(valid, oldest - _US)), 0
    until = horizon if valid.ends_at is None else min(horizon, valid.ends_at - _US)
    after_first = first_plan_after(valid, first)  # memoised per spec: one step at most
    if after_first is None or after_first > until:
        return first, 0  # the usual case: the stored next plan is the only one due
    recurrence = recurrence_for(valid.spec_key)
    plan = recurrence.latest_at_or_before(until)
    if plan is None or plan < first:
        return first, 0
    return plan, count_plans_between(recurrence, first - _US, plan, _SKIP_COUNT_CAP)
