"""``explain``: why a plan did or did not run, plan by plan, for one scope of a job or for the
whole job. Read from the ledger (the plans that have a row), the skipped spans the claims
recorded (migration 0019) and the job's plan times (its code's recurrence, else the one its
replicas recorded); what is derived when read, never written:

- ``before_first_sight``: plans before the scope's cursor was first written;
- ``no_replica``: plans the cursor has not reached while no live replica registers the job;
- ``paused``: the same while the job (or the schedule) is paused now (recorded on resume);
- ``due`` / ``not_due``: plans waiting for a claim, and the ones still to come;
- ``excluded``: plans on a day the job's calendar skips (recorded by the claim that passes
  them, derived from the job's code before that);
- ``unrecorded``: plans the cursor passed with neither row nor span (pruned, or skipped by a
  version that did not record skips).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from .._errors import ConfigError, NotFoundError
from .._jobs.spec import JobSpec, scopes_mode
from .._planning.calendars import skips_excluded
from .._planning.recurrence import CadenceRecurrence, Recurrence
from .._planning.schedules import recurrence_for, recurrence_plans
from .._planning.skips import described_recurrence
from .._records import Row
from .._storage.dashboard import DashboardStore
from .._storage.skips import SkipStore
from .._storage.statements import Conn
from .._storage.store import Store
from .._structures import GLOBAL, ExplainLine, Explanation, Scope, check_job_name
from .._times import US, aware

DEFAULT_WINDOW = timedelta(hours=24)
DEFAULT_LINES = 50
MAX_LINES = 1000
MAX_PLANS = 2000  # plan times listed for one answer: older ones are left out (truncated)
JOB_ROWS = 30_000  # ledger rows a whole job's answer counts, about
_ROW_STATES = {"RUNNING": "running", "PENDING": "pending"}


@dataclass(frozen=True, slots=True)
class _Job:
    """What explain knows of a job: its plans, scopes mode, pause and live replicas."""

    name: str
    recurrence: Recurrence | None
    schedule: str | None
    mode: str | None
    paused: bool
    runners: tuple[str, ...]
    delay: timedelta
    now: datetime


class ExplainOperations:
    """The ``explain`` operation of :class:`~pgsched._operations.core.Operations`."""

    _store: Store
    _skips: SkipStore
    _dash: DashboardStore
    _conn: Callable[[], AbstractAsyncContextManager[Conn]]
    _jobs: Callable[[], Mapping[str, JobSpec]]

    async def explain(
        self,
        job: str,
        scope: Scope | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = DEFAULT_LINES,
    ) -> Explanation:
        """What happened to each plan of ``job`` (of ``scope``; of every scope at once when
        the job has scopes and none is given) with a plan time in ``[since, until]`` (by
        default the 24 hours up to now): ran, running, skipped and why, due, not due yet;
        consecutive plans of one outcome folded into one line, the last ``limit`` lines."""
        check_job_name(job)
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LINES:
            raise ConfigError(f"limit={limit!r} must be an integer between 1 and {MAX_LINES}")
        if scope is not None and not isinstance(scope, Scope):
            raise ConfigError(f"job {job!r}: scope={scope!r} must be a pgsched.Scope")
        start = None if since is None else aware(since, "since")
        end = None if until is None else aware(until, "until")
        async with self._conn() as conn:
            known = await self._job(conn, job)
            end = end or known.now
            start = start or end - DEFAULT_WINDOW
            if start >= end:
                raise ConfigError(
                    f"since={start.isoformat()} must come before until={end.isoformat()}"
                )
            if scope is None and known.mode in ("global", None):
                scope = GLOBAL
            if scope is None:
                lines, truncated = await self._job_lines(conn, known, (start, end), limit)
                return _answer(known, None, (start, end), lines, truncated, None)
            return await self._scope_answer(conn, known, scope, (start, end), limit)

    async def _job(self, conn: Conn, job: str) -> _Job:
        local = self._jobs().get(job)
        state = await self._skips.explain_job(conn, job)
        if state is None and local is None:
            raise NotFoundError(f"unknown job {job!r}: no replica has registered it")
        state = state or {"schedule": None, "scopes": None, "paused": False, "runners": []}
        if local is not None:
            recurrence = None if local.dynamic else local.recurrence
            mode: str | None = scopes_mode(local)
        else:
            recurrence, mode = described_recurrence(state["schedule"]), state["scopes"]
        return _Job(
            name=job,
            recurrence=recurrence,
            schedule=state["schedule"] or (local.recurrence.describe() if local else None),
            mode=mode,
            paused=bool(state["paused"]),
            runners=tuple(state["runners"]),
            delay=local.schedule_delay if local is not None else timedelta(0),
            now=state.get("now") or await self._store.now(conn),
        )

    async def _scope_answer(
        self,
        conn: Conn,
        known: _Job,
        scope: Scope,
        window: tuple[datetime, datetime],
        limit: int,
    ) -> Explanation:
        key = (scope.kind, scope.id)
        cursor = await self._skips.explain_scope(conn, known.name, *key)
        if cursor is not None and (cursor["every_us"] or cursor["cron"]):
            local = self._jobs().get(known.name)
            named = cursor["calendar"]
            calendar = None if named is None or local is None else local.calendars.get(named)
            if named is None or calendar is not None:  # else its plans are unknown here
                tz = cursor["timezone"] or "UTC"
                schedule = (cursor["every_us"], cursor["cron"], tz, calendar, cursor["on_excluded"])
                known = replace(known, recurrence=recurrence_for(schedule))
            known = replace(known, paused=known.paused or bool(cursor["paused"]))
        plans, start, truncated = _plans(known.recurrence, window)
        bounded = (start, window[1])
        runs = await self._skips.explain_runs(conn, known.name, key, bounded)
        spans = await self._skips.explain_spans(conn, known.name, key, bounded)
        lines = _fold(_scope_lines(known, cursor, plans, runs, spans))
        truncated = truncated or len(lines) > limit
        nxt = cursor["next_plan_time"] if cursor else None
        return _answer(known, scope, window, lines[-limit:], truncated, (cursor, nxt))

    async def _job_lines(
        self, conn: Conn, known: _Job, window: tuple[datetime, datetime], limit: int
    ) -> tuple[list[ExplainLine], bool]:
        """A whole job's plans, one line each (its scopes' rows and skips counted)."""
        plans, _, truncated = _plans(known.recurrence, window)
        if known.recurrence is None:
            recent = await self._dash.recent_plans(conn, known.name, window[1], limit)
            plans = sorted(p for p in recent if p >= window[0])
        truncated = truncated or len(plans) > limit
        plans = plans[-limit:]
        # Each plan of a fan-out counts a row per scope: the newest plan first, then as many
        # older ones as JOB_ROWS leaves room for (a job of 10,000 scopes: three plans).
        rows = await self._skips.explain_plans(conn, known.name, plans[-1:]) if plans else []
        per_plan = sum(rows[0]["statuses"].values()) if rows else 0
        fit = max(1, (JOB_ROWS - per_plan) // max(per_plan, 1))
        older = plans[-1 - fit : -1]
        truncated = truncated or len(older) < len(plans) - 1
        if older:
            rows = [*await self._skips.explain_plans(conn, known.name, older), *rows]
        spans = (
            await self._skips.explain_job_spans(conn, known.name, rows[0]["plan_time"], plans[-1])
            if rows
            else []
        )
        lines = []
        for row in rows:
            t = row["plan_time"]
            statuses, skipped = dict(row["statuses"]), _skipped_at(spans, t)
            if statuses or skipped:
                state = "ran" if statuses else "skipped"
                lines.append(ExplainLine(state, t, t, statuses=statuses, skipped=skipped))
            else:
                lines.append(_gap(known, None, t))
        return _fold(lines), truncated


def _skipped_at(spans: Sequence[Row], plan: datetime) -> dict[str, int]:
    """How many scopes skipped ``plan``, by reason."""
    out: dict[str, int] = {}
    for s in spans:
        if s["first_plan"] <= plan <= s["last_plan"]:
            out[s["reason"]] = out.get(s["reason"], 0) + s["scopes"]
    return out


def _answer(
    known: _Job,
    scope: Scope | None,
    window: tuple[datetime, datetime],
    lines: Sequence[ExplainLine],
    truncated: bool,
    cursor: tuple[Row | None, datetime | None] | None,
) -> Explanation:
    row, nxt = cursor or (None, None)
    return Explanation(
        job=known.name,
        scope=scope,
        since=window[0],
        until=window[1],
        now=known.now,
        schedule=known.schedule,
        lines=tuple(lines),
        truncated=truncated,
        first_seen_at=row["first_seen_at"] if row else None,
        next_plan=nxt,
    )


def _plans(
    recurrence: Recurrence | None, window: tuple[datetime, datetime]
) -> tuple[list[datetime], datetime, bool]:
    """The recurrence's plans in ``[since, until]``, the newest :data:`MAX_PLANS` of them;
    where they start, and whether older ones were left out."""
    start, end = window
    if recurrence is None:
        return [], start, False
    count, exact = recurrence_plans(recurrence, start - US, end, MAX_PLANS)
    truncated = count > MAX_PLANS or not exact
    if truncated:
        if isinstance(recurrence, CadenceRecurrence):
            start = end - recurrence.every * (MAX_PLANS - 1)
        else:  # a cron: its density over the window, assumed even
            start = end - (end - start) * MAX_PLANS / max(count, MAX_PLANS + 1)
    plans = list(recurrence.plans_between(start - US, end))
    if skips_excluded(recurrence):
        # The plans its calendar skips are listed too, each said to be excluded.
        plans = sorted({*plans, *recurrence.excluded_between(start - US, end)})
    plans = plans[-MAX_PLANS:]
    return plans, (plans[0] if plans and truncated else start), truncated


def _scope_lines(
    known: _Job,
    cursor: Row | None,
    plans: Sequence[datetime],
    runs: Sequence[Row],
    spans: Sequence[Row],
) -> list[ExplainLine]:
    """One line per plan (a span of skips one line), oldest first."""
    by_plan = {r["plan_time"]: r for r in runs}
    ordered = sorted(spans, key=lambda s: s["first_plan"])
    times = sorted(set(plans) | set(by_plan) | {s["first_plan"] for s in ordered})
    lines: list[ExplainLine] = []
    covered: datetime | None = None  # the last plan of the span a line showed
    for t in times:
        row = by_plan.get(t)
        if row is not None:
            lines.append(_ran(row))
            continue
        if covered is not None and t <= covered:
            continue
        span = next((s for s in ordered if s["first_plan"] <= t <= s["last_plan"]), None)
        if span is not None:
            covered = span["last_plan"]
            lines.append(
                ExplainLine("skipped", span["first_plan"], covered, span["plans"], span["reason"])
            )
            continue
        lines.append(_gap(known, cursor, t))
    return lines


def _ran(row: Row) -> ExplainLine:
    status = row["status"]
    return ExplainLine(
        _ROW_STATES.get(status, "ran"),
        row["plan_time"],
        row["plan_time"],
        status=status,
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        runner=row["runner_id"],
        execution_id=row["id"],
        trigger=row["trigger"],
    )


def _gap(known: _Job, cursor: Row | None, t: datetime) -> ExplainLine:
    """A plan with neither row nor span: why, from the calendar, the cursor, the pause and
    the replicas (a plan the calendar skips is excluded before the claim records it)."""
    recurrence = known.recurrence
    if skips_excluded(recurrence) and not recurrence.calendar.is_working_instant(t):
        return ExplainLine("skipped", t, t, reason="excluded")
    if t > known.now - known.delay:
        return ExplainLine("not_due", t, t)
    if cursor is not None and t < cursor["first_seen_at"]:
        return ExplainLine("skipped", t, t, reason="before_first_sight")
    waiting = cursor is None or (
        cursor["next_plan_time"] is not None and t >= cursor["next_plan_time"]
    )
    if not waiting:
        return ExplainLine("unrecorded", t, t)
    if known.paused:
        return ExplainLine("skipped", t, t, reason="paused")
    if not known.runners:
        return ExplainLine("skipped", t, t, reason="no_replica")
    return ExplainLine("due", t, t)


def _fold(lines: Sequence[ExplainLine]) -> list[ExplainLine]:
    """Consecutive lines of one outcome without a row of their own as one line."""
    out: list[ExplainLine] = []
    for line in lines:
        last = out[-1] if out else None
        if (
            last is not None
            and line.execution_id is None
            and last.execution_id is None
            and not (line.statuses or last.statuses or line.skipped or last.skipped)
            and (last.state, last.reason) == (line.state, line.reason)
        ):
            out[-1] = replace(last, last_plan=line.last_plan, plans=last.plans + line.plans)
        else:
            out.append(line)
    return out
