"""The operations core behind the dashboard on a real PostgreSQL: "retry now" and what a
replica's claim makes of it, the grid's keyset pages and prefix search over scopes, and the
action log of single and bulk actions."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from psycopg import sql

import pgsched
from pgsched._operations.audit import Actor, acting
from pgsched._operations.dashboard import each
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import insert_row, row_by_id, table

pytestmark = pytest.mark.integration


def _run(dsn: str, schema: str, work: Any) -> Any:
    async def go() -> Any:
        async with pgsched.AsyncAdmin(dsn, schema) as admin:
            return await work(admin)

    return asyncio.run(go())


def _seed_job(db: Any, schema: str, job: str) -> None:
    db.execute(
        sql.SQL("INSERT INTO {} (job_name) VALUES (%s)").format(table(schema, "job_state")), (job,)
    )


def test_retry_now_makes_a_failed_run_due_and_a_replica_retries_it(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    plan = past_plan(db)
    s = make_scheduler("r1")
    s.register(lambda run: 1, name="flaky", planner=FixedPlans(plan))
    failed = insert_row(
        db,
        migrated,
        job_name="flaky",
        plan_time=plan,
        status="FAILED",
        attempt=1,
        max_attempts=1,
        runner_id="gone",
        error_code="handler_error",
        error_msg="boom",
    )
    assert s.run_once().started == 0  # no retry left: nothing to do
    job = _run(runtime_dsn, migrated, lambda a: a.retry_now(failed["id"]))
    assert job == "flaky"
    row = row_by_id(db, migrated, failed["id"])
    assert row["max_attempts"] == 2 and row["next_retry_at"] is not None
    assert s.run_once().started == 1
    row = row_by_id(db, migrated, failed["id"])
    assert (row["attempt"], row["status"]) in ((2, "SUCCESS"), (2, "RUNNING"))


def test_retry_now_refuses_what_is_not_failed(migrated: str, db: Any, runtime_dsn: str) -> None:
    done = insert_row(
        db,
        migrated,
        job_name="j",
        plan_time=past_plan(db),
        status="SUCCESS",
        attempt=1,
        max_attempts=1,
    )
    with pytest.raises(pgsched.PgschedError, match="is SUCCESS; only FAILED"):
        _run(runtime_dsn, migrated, lambda a: a.retry_now(done["id"]))
    with pytest.raises(pgsched.NotFoundError):
        _run(runtime_dsn, migrated, lambda a: a.retry_now("00000000-0000-0000-0000-000000000000"))
    with pytest.raises(pgsched.ConfigError):
        _run(runtime_dsn, migrated, lambda a: a.retry_now("not-a-uuid"))


def test_grid_pages_and_searches_scopes_with_bounded_reads(
    migrated: str, db: Any, runtime_dsn: str
) -> None:
    _seed_job(db, migrated, "fan")
    base = past_plan(db, timedelta(minutes=10))
    db.execute(
        sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status,"
            " attempt, max_attempts)"
            " SELECT 'fan', k, 's' || lpad(i::text, 3, '0'), %s + m * interval '1 minute',"
            "   'schedule', 'SUCCESS', 1, 1"
            " FROM generate_series(0, 119) AS i, generate_series(0, 3) AS m,"
            "   unnest(ARRAY['tenant', 'user']) AS k"
        ).format(table(migrated)),
        (base,),
    )

    async def read(admin: pgsched.AsyncAdmin) -> Any:
        first = await admin.job_grid("fan", rows=50, plans=3)
        second = await admin.job_grid("fan", rows=50, plans=3, after=first.next_after)
        found = await admin.job_grid("fan", search="tenant:s01", rows=50)
        anykind = await admin.job_grid("fan", search="s119", rows=50)
        older = await admin.job_grid("fan", rows=5, plans=3, before=first.older_than)
        return first, second, found, anykind, older

    first, second, found, anykind, older = _run(runtime_dsn, migrated, read)
    assert [str(s) for s in first.scopes[:2]] == ["tenant:s000", "tenant:s001"]
    assert len(first.scopes) == 50 and str(first.next_after) == "tenant:s049"
    assert str(second.scopes[0]) == "tenant:s050"
    assert len(first.plans) == 3 and first.plans[0].plan_time == base + timedelta(minutes=3)
    assert len(first.cells) == 150 and all(c.status == "SUCCESS" for c in first.cells.values())
    assert [str(s) for s in found.scopes] == [f"tenant:s01{i}" for i in range(10)]
    assert found.next_after is None
    assert [str(s) for s in anykind.scopes] == ["tenant:s119", "user:s119"]
    assert [p.plan_time for p in older.plans] == [base]
    assert first.plans[0].success == 240 and first.plans[0].outcome == "SUCCESS"


def test_actions_are_recorded_with_their_outcome(migrated: str, db: Any, runtime_dsn: str) -> None:
    _seed_job(db, migrated, "logged")
    ops_actor = Actor("dashboard", "ops #1234abcd")

    async def act(admin: pgsched.AsyncAdmin) -> Any:
        ops = acting(admin, ops_actor)
        await ops.pause("logged")
        with pytest.raises(pgsched.NotFoundError):
            await ops.pause("nope")
        bad = "00000000-0000-0000-0000-000000000000"
        errors = await each([bad, "x"], ops.cancel)
        return errors, await admin.actions(limit=10), await admin.actions("logged")

    errors, latest, of_job = _run(runtime_dsn, migrated, act)
    assert set(errors) == {"00000000-0000-0000-0000-000000000000", "x"}
    assert all(errors.values())
    assert [(a.action, a.outcome) for a in latest][-2:] == [("pause", "error"), ("pause", "ok")]
    # an id that is no UUID is refused before anything is looked up: not an action
    newest = latest[0]
    assert (newest.action, newest.outcome, str(newest.execution_id)) == (
        "cancel",
        "error",
        "00000000-0000-0000-0000-000000000000",
    )
    assert len(latest) == 3
    assert [(a.surface, a.actor, a.action, a.job) for a in of_job] == [
        ("dashboard", "ops #1234abcd", "pause", "logged")
    ]


def test_the_job_page_marks_skipped_cells_with_their_reason_and_lists_the_spans(
    migrated: str, db: Any, runtime_dsn: str
) -> None:
    from pgsched._facades.http.web import Dashboard, WebRequest

    _seed_job(db, migrated, "mixed")
    p0, p1 = past_plan(db, timedelta(minutes=20)), past_plan(db, timedelta(minutes=10))
    for ident, plan in (("a", p0), ("a", p1), ("<b>", p0)):
        insert_row(
            db,
            migrated,
            job_name="mixed",
            scope_kind="t",
            scope_id=ident,
            plan_time=plan,
            status="SUCCESS",
        )
    db.execute(
        sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, reason, first_plan, last_plan, plans)"
            " VALUES ('mixed', 't', '<b>', 'paused', %s, %s, 1)"
        ).format(table(migrated, "cron_skips")),
        (p1, p1),
    )

    async def read(admin: pgsched.AsyncAdmin) -> Any:
        grid = await admin.job_grid("mixed", rows=10, plans=5)
        request = WebRequest("GET", "/job", {"name": "mixed"}, {}, {}, {}, "/")
        return grid, await Dashboard(admin).handle(request)

    grid, page = _run(runtime_dsn, migrated, read)
    assert grid.skipped == {(pgsched.Scope("t", "<b>"), p1): "paused"}
    assert [(str(s.scope), s.reason, s.plans) for s in grid.spans] == [("t:<b>", "paused", 1)]
    assert page.status == 200
    assert f"t:&lt;b&gt; at {p1.isoformat()}: skipped (paused)" in page.body
    assert "t:<b>" not in page.body  # every scope escaped
    assert 'aria-label="Skipped plans"' in page.body


def test_start_lag_is_the_first_attempt_of_scheduled_plans_only(
    migrated: str, db: Any, runtime_dsn: str
) -> None:
    """A plan started 1.5 s late whose failure an operator retried 106 s after it (the row now
    shows the retry) charts 1.5 s; a manual run started late charts nothing."""
    _seed_job(db, migrated, "lagged")
    retried_plan = past_plan(db, timedelta(minutes=10))
    retried = insert_row(
        db,
        migrated,
        job_name="lagged",
        plan_time=retried_plan,
        status="SUCCESS",
        attempt=2,
        max_attempts=2,
        runner_id="r",
        started_at=retried_plan + timedelta(seconds=106),
        finished_at=retried_plan + timedelta(seconds=107),
        duration_ms=1000,
    )
    db.execute(
        sql.SQL(
            "INSERT INTO {} (execution_id, fencing_token, attempt, runner_id, started_at,"
            " finished_at, error_code, error_msg) VALUES (%s, 1, 1, 'r', %s, %s,"
            " 'handler_error', 'boom')"
        ).format(table(migrated, "cron_attempts")),
        (
            retried["id"],
            retried_plan + timedelta(seconds=1.5),
            retried_plan + timedelta(seconds=2),
        ),
    )
    plain_plan = past_plan(db, timedelta(minutes=5))
    insert_row(
        db,
        migrated,
        job_name="lagged",
        plan_time=plain_plan,
        status="SUCCESS",
        attempt=1,
        max_attempts=1,
        runner_id="r",
        started_at=plain_plan + timedelta(milliseconds=250),
        finished_at=plain_plan + timedelta(seconds=1),
        duration_ms=750,
    )
    manual_plan = past_plan(db, timedelta(minutes=2))
    insert_row(
        db,
        migrated,
        job_name="lagged",
        plan_time=manual_plan,
        trigger="manual",
        status="SUCCESS",
        attempt=1,
        max_attempts=1,
        runner_id="r",
        started_at=manual_plan + timedelta(seconds=50),
        finished_at=manual_plan + timedelta(seconds=51),
        duration_ms=1000,
    )
    history = _run(runtime_dsn, migrated, lambda a: a.plan_history("lagged", limit=10))
    lags = {p.plan_time: (p.lag_p50_ms, p.lag_max_ms) for p in history}
    assert lags == {
        manual_plan: (None, None),
        plain_plan: (250, 250),
        retried_plan: (1500, 1500),
    }
