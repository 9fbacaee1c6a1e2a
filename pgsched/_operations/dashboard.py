"""The operations core for the dashboard: bounded reads of a job's recent plans by scope, its
plan history (outcome, start lag, duration), failures, pending and upcoming plans, a dynamic
job's schedules with their recent runs; "retry now"; the action log's page and bulk
actions. Part of :class:`~pgsched._operations.core.Operations`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from .._errors import ConfigError, NotFoundError, PgschedError
from .._planning.schedules import read_schedule
from .._records import Row
from .._storage.dashboard import DashboardStore
from .._storage.skips import SkipStore
from .._storage.statements import Conn
from .._storage.store import Store
from .._structures import (
    ActionRecord,
    Execution,
    JobStatus,
    PlanSummary,
    Schedule,
    Scope,
    SkippedSpan,
    UpcomingPlan,
    check_job_name,
)
from .._times import aware
from .audit import Action, Audited, Entry
from .sessions import Sessions

MAX_GRID_PLANS = 60
MAX_GRID_ROWS = 200
GRID_SPANS = 20  # the job page's latest skipped spans
MAX_ACTIONS = 200
COUNT_CAP = 1_000  # the dashboard's counts stop here: "1,000+"


@dataclass(frozen=True, slots=True)
class ScopeSearch:
    """``KIND:ID-prefix`` (one kind) or ``ID-prefix`` (every kind), from a search box."""

    kind: str | None
    prefix: str

    @classmethod
    def parse(cls, text: str | None) -> ScopeSearch:
        text = (text or "").strip()
        if len(text) > 1000:
            raise ConfigError("the scope search must be at most 1000 characters")
        kind, sep, prefix = text.partition(":")
        return cls(kind, prefix) if sep and kind else cls(None, text)


@dataclass(frozen=True, slots=True)
class JobGrid:
    """A job's recent plans (newest first) by a page of its scopes, with each cell's
    execution; ``next_after`` starts the next page of scopes (None on the last)."""

    plans: list[PlanSummary]
    scopes: list[Scope]
    cells: dict[tuple[Scope, datetime], Execution]
    next_after: Scope | None
    older_than: datetime | None  # the next page of plans: before this one
    # The reason of each cell whose plan its scope skipped, and the job's latest spans.
    skipped: dict[tuple[Scope, datetime], str] = field(default_factory=dict)
    spans: list[SkippedSpan] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class SchedulePage:
    """A page of a dynamic job's schedules with each one's latest runs, newest first."""

    schedules: list[Schedule]
    runs: dict[Scope, list[Execution]] = field(default_factory=dict)
    next_after: Scope | None = None


class DashboardOperations(Audited):
    """The dashboard's operations (:class:`Operations` sets the attributes declared here)."""

    _store: Store
    _dash: DashboardStore
    _skips: SkipStore
    _conn: Callable[[], AbstractAsyncContextManager[Conn]]

    async def job_overview(self) -> list[JobStatus]:
        """What :meth:`status` gives, for at most 1000 jobs, each count stopping past
        :data:`COUNT_CAP` (a count above it means "more than COUNT_CAP")."""
        async with self._conn() as conn:
            return await self._dash.job_summary(conn, COUNT_CAP)

    async def plan_history(
        self, job: str, *, limit: int = 30, before: datetime | None = None
    ) -> list[PlanSummary]:
        """The job's latest ``limit`` plans before ``before``, newest first, each with the
        states of its executions and their start lag and duration (from a bounded sample)."""
        check_job_name(job)
        _check_limit("limit", limit, MAX_GRID_PLANS)
        end = None if before is None else aware(before, "before")
        async with self._conn() as conn:
            plans = await self._dash.recent_plans(conn, job, end, limit)
            return await self._dash.plan_summaries(conn, job, plans) if plans else []

    async def job_grid(
        self,
        job: str,
        *,
        search: str | None = None,
        after: Scope | None = None,
        rows: int = 50,
        plans: int = 12,
        before: datetime | None = None,
    ) -> JobGrid:
        """A page of ``rows`` scopes (after ``after``, matching ``search``) by the job's
        latest ``plans`` plans before ``before``: every read an index probe or a bounded
        range, whatever the job's fan-out."""
        check_job_name(job)
        _check_limit("rows", rows, MAX_GRID_ROWS)
        found = ScopeSearch.parse(search)
        summaries = await self.plan_history(job, limit=plans, before=before)
        times = [p.plan_time for p in summaries]
        async with self._conn() as conn:
            page = await self._scope_page(conn, job, found, after, rows + 1)
            shown = page[:rows]
            cells = await self._dash.cells(conn, job, shown, times) if shown and times else []
            keys = [(s.kind, s.id) for s in shown]
            skips = await self._skips.grid_skips(conn, job, keys, times) if keys and times else []
            spans = await self._skips.latest_spans(conn, job, GRID_SPANS)
        by_key = {(s.kind, s.id): s for s in shown}
        return JobGrid(
            skipped={
                (by_key[r["scope_kind"], r["scope_id"]], r["plan_time"]): r["reason"] for r in skips
            },
            spans=spans,
            plans=summaries,
            scopes=shown,
            cells={(c.scope, c.plan_time): c for c in cells},
            next_after=shown[-1] if len(page) > rows else None,
            older_than=times[-1] if len(times) == plans else None,
        )

    async def _scope_page(
        self, conn: Conn, job: str, found: ScopeSearch, after: Scope | None, limit: int
    ) -> list[Scope]:
        kinds = (
            [found.kind] if found.kind else await self._dash.scope_kinds(conn, job, schedules=False)
        )
        out: list[Scope] = []
        for kind in kinds:
            if after is not None and kind < after.kind:
                continue
            start = after.id if after is not None and kind == after.kind else ""
            need = limit - len(out)
            out += await self._dash.ledger_scopes(conn, job, kind, start, found.prefix, need)
            if len(out) >= limit:
                break
        return out

    async def schedules_page(
        self,
        job: str,
        *,
        search: str | None = None,
        after: Scope | None = None,
        limit: int = 50,
        runs: int = 5,
    ) -> SchedulePage:
        """A page of the dynamic job's schedules (after ``after``, matching ``search``), each
        with its latest ``runs`` executions."""
        check_job_name(job)
        _check_limit("limit", limit, MAX_GRID_ROWS)
        found = ScopeSearch.parse(search)
        async with self._conn() as conn:
            kinds = (
                [found.kind]
                if found.kind
                else await self._dash.scope_kinds(conn, job, schedules=True)
            )
            rows: list[Row] = []
            for kind in kinds:
                if after is not None and kind < after.kind:
                    continue
                start = after.id if after is not None and kind == after.kind else ""
                need = limit + 1 - len(rows)
                rows += await self._dash.schedules_page(conn, job, kind, start, found.prefix, need)
                if len(rows) > limit:
                    break
            page = [read_schedule(job, r) for r in rows[:limit]]
            recent = await self._dash.scope_runs(conn, job, [s.scope for s in page], runs)
        by_scope: dict[Scope, list[Execution]] = {}
        for run in recent:
            by_scope.setdefault(run.scope, []).append(run)
        more = page[-1].scope if len(rows) > limit else None
        return SchedulePage(page, by_scope, more)

    async def job_failures(self, job: str, limit: int = 20) -> list[Execution]:
        """The job's latest FAILED executions, newest first."""
        check_job_name(job)
        _check_limit("limit", limit, MAX_GRID_ROWS)
        async with self._conn() as conn:
            return await self._dash.job_failures(conn, job, limit)

    async def job_pending(self, job: str, limit: int = 20) -> list[Execution]:
        """The job's PENDING executions, earliest plan first."""
        check_job_name(job)
        _check_limit("limit", limit, MAX_GRID_ROWS)
        async with self._conn() as conn:
            return await self._dash.pending(conn, job, limit)

    async def job_upcoming(self, job: str, limit: int = 10) -> list[UpcomingPlan]:
        """The job's next plans: its earliest due schedules (dynamic) or the plans its
        replicas registered ahead."""
        check_job_name(job)
        _check_limit("limit", limit, MAX_GRID_ROWS)
        async with self._conn() as conn:
            return await self._dash.upcoming(conn, job, limit)

    async def retry_now(self, execution_id: UUID | str) -> str:
        """Make a FAILED execution due for a retry now (one more attempt if it had none
        left); returns its job. The replicas' claims take it as any due retry."""
        try:
            ident = UUID(str(execution_id))
        except ValueError:
            raise ConfigError(f"execution id {execution_id!r} is not a UUID") from None
        async with self._recorded(Entry(Action.RETRY, execution_id=ident)) as conn:
            job = await self._dash.retry_now(conn, ident)
            if job is None:
                status = await self._dash.execution_status(conn, ident)
                if status is None:
                    raise NotFoundError(f"execution {ident} does not exist")
                raise PgschedError(
                    f"execution {ident} is {status}; only FAILED runs can be retried"
                )
            await self._store.notify(conn, json.dumps({"event": "retry", "job": job}))
        return job

    # -- the action log ---------------------------------------------------------------------

    @property
    def sessions(self) -> Sessions:
        """The dashboard's sign-in sessions."""
        return Sessions(self._dash, self._conn)

    async def actions(self, job: str | None = None, limit: int = 20) -> list[ActionRecord]:
        """The latest recorded actions, newest first (of ``job`` when given)."""
        if job is not None:
            check_job_name(job)
        _check_limit("limit", limit, MAX_ACTIONS)
        async with self._conn() as conn:
            return await self._dash.actions(conn, job, limit)


async def each(
    targets: Sequence[str], work: Callable[[str], Awaitable[object]]
) -> dict[str, str | None]:
    """A bulk action: ``work`` (an operation, recorded as any) for each target in turn;
    returns each target's error (None when it succeeded). One failing target stops none of
    the others."""
    if not 1 <= len(targets) <= MAX_GRID_ROWS:
        raise ConfigError(f"select from 1 to {MAX_GRID_ROWS} items (got {len(targets)})")
    errors: dict[str, str | None] = {}
    for target in targets:
        try:
            await work(target)
            errors[target] = None
        except PgschedError as exc:
            errors[target] = str(exc)
    return errors


def _check_limit(name: str, value: object, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigError(f"{name}={value!r} must be an integer from 1 to {most}")
