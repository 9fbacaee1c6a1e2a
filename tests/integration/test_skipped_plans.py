"""Why a plan did not run: the spans of skipped plans a claim records in its transaction
(migration 0019), one row per run of skips of a (job, scope, reason), and their retention."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from pgsched._storage import statements as store_module
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import db_now, insert_row, rows, table
from tests.support.threads import Recorder
from tests.support.waiting import wait_until

S = timedelta(seconds=1)


def spans(db: psycopg.Connection[Any], schema: str, job: str) -> list[dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(
            sql.SQL(
                "SELECT scope_kind, scope_id, reason, first_plan, last_plan, plans FROM {}"
                " WHERE job_name = %s ORDER BY first_plan, reason"
            ).format(table(schema, "cron_skips")),
            (job,),
        )
        return cur.fetchall()


def wait_past(db: Any, instant: datetime, what: str) -> None:
    wait_until(lambda: db_now(db) > instant, 20, what)


def seed(db: Any, schema: str, job: str, plan: datetime) -> None:
    """A scheduled plan that ran: a scope without a cursor resumes after it."""
    done = db_now(db)
    insert_row(db, schema, job_name=job, plan_time=plan, status="SUCCESS", finished_at=done)


def test_plans_due_while_paused_are_one_paused_span_and_do_not_run(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    now = past_plan(db, timedelta(0))
    first = now - S
    paused = [now + 2 * S, now + 2.5 * S, now + 3 * S]
    after = now + 30 * S
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="nightly", planner=FixedPlans(first, *paused, after))
    assert s.run_once().succeeded == 1  # the plan before the pause
    s.pause("nightly")
    wait_past(db, paused[-1] + 0.2 * S, "the three plans to fall due while paused")
    assert s.run_once().claimed == 0
    s.resume("nightly")
    report = s.run_once()
    assert report.claimed == 0  # under latest_only the last of them would have run
    assert report.skipped == 3
    assert [r.plan_time for r in recorder.runs] == [first]
    ((span),) = spans(db, migrated, "nightly")
    assert (span["reason"], span["plans"]) == ("paused", 3)
    assert (span["first_plan"], span["last_plan"]) == (paused[0], paused[-1])
    assert s.run_once().skipped == 0  # recorded once

    lines = s.admin.explain("nightly").lines
    assert [(x.state, x.reason, x.plans) for x in lines] == [
        ("ran", None, 1),
        ("skipped", "paused", 3),
    ]
    assert (lines[0].status, lines[0].execution_id) == ("SUCCESS", recorder.runs[0].execution_id)
    assert (lines[1].first_plan, lines[1].last_plan) == (paused[0], paused[-1])


def test_latest_only_after_downtime_records_the_superseded_plans(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    p0, p1, p2, p3 = (past_plan(db, timedelta(minutes=m)) for m in (40, 30, 20, 10))
    seed(db, migrated, "hourly", p0)
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="hourly", planner=FixedPlans(p0, p1, p2, p3))
    report = s.run_once()
    assert (report.succeeded, report.skipped) == (1, 2)
    assert [r.plan_time for r in recorder.runs] == [p3]
    ((span),) = spans(db, migrated, "hourly")
    assert (span["reason"], span["first_plan"], span["last_plan"], span["plans"]) == (
        "superseded",
        p1,
        p2,
        2,
    )


def test_max_lateness_records_the_late_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    p0, p1, p2 = (past_plan(db, timedelta(minutes=m)) for m in (30, 20, 10))
    seed(db, migrated, "late", p0)
    s = make_scheduler()
    s.register(lambda run: None, name="late", planner=FixedPlans(p0, p1, p2), max_lateness="1m")
    assert s.run_once().claimed == 0
    found = [
        (r["reason"], r["first_plan"], r["last_plan"], r["plans"])
        for r in spans(db, migrated, "late")
    ]
    assert found == [("superseded", p1, p1, 1), ("max_lateness", p2, p2, 1)]


def test_a_second_consecutive_skip_extends_the_span(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    p0, p1, p2 = (past_plan(db, timedelta(minutes=m)) for m in (30, 20, 10))
    now = past_plan(db, timedelta(0))
    p3, p4 = now + 2 * S, now + 2.5 * S
    seed(db, migrated, "drip", p0)
    options: dict[str, Any] = {
        "catch_up": "every_plan",
        "max_lateness": "1s",
        "overlap": "allow",
        "max_plans_per_tick": 5,
    }
    s = make_scheduler()
    s.register(lambda run: None, name="drip", planner=FixedPlans(p0, p1, p2, p3, p4), **options)
    assert s.run_once().skipped == 2
    wait_past(db, p4 + 1.5 * S, "the next two plans to be late")
    assert s.run_once().skipped == 2
    ((span),) = spans(db, migrated, "drip")
    assert (span["reason"], span["first_plan"], span["last_plan"], span["plans"]) == (
        "max_lateness",
        p1,
        p4,
        4,
    )


def test_a_schedule_outside_its_window_records_its_due_plans(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(lambda run: None, name="remind", dynamic=True)
    scope = pgsched.Scope("user", "7")
    put = s.put_schedule("remind", scope, every="1s")
    assert put.next_plan_time is not None
    # The window moved without the put that recomputes the next plan (a row written by hand
    # or restored): the stored next plan is before the window starts.
    db.execute(
        sql.SQL(
            "UPDATE {} SET starts_at = clock_timestamp() + interval '1 hour'"
            " WHERE job_name = 'remind'"
        ).format(table(migrated, "schedules"))
    )
    wait_past(db, put.next_plan_time + 1.2 * S, "two plans to fall due")
    report = s.run_once()
    assert report.claimed == 0
    ((span),) = spans(db, migrated, "remind")
    assert (span["scope_kind"], span["scope_id"], span["reason"]) == ("user", "7", "outside_window")
    assert span["first_plan"] == put.next_plan_time and span["plans"] >= 2
    assert span["plans"] == report.skipped
    assert rows(db, migrated, "remind") == []


def test_a_tick_that_skips_nothing_runs_no_span_statement(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    names: list[str] = []
    execute = store_module.Statements._execute

    async def traced(self: Any, cur: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        names.append(name)
        return await execute(self, cur, name, *args, **kwargs)

    monkeypatch.setattr(store_module.Statements, "_execute", traced)
    s = make_scheduler()
    s.register(lambda run: None, name="quiet", planner=FixedPlans(past_plan(db)))
    assert s.run_once().succeeded == 1
    assert "claim_cursors_of_jobs" in names  # a joint claim (of the one job)
    assert "record_skips" not in names
    assert spans(db, migrated, "quiet") == []


def test_prune_drops_the_spans_older_than_the_retention(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    now = db_now(db)
    old, recent = now - timedelta(days=40), now - timedelta(days=2)
    for first in (old, recent):
        db.execute(
            sql.SQL(
                "INSERT INTO {} (job_name, scope_kind, scope_id, reason, first_plan, last_plan,"
                " plans) VALUES ('kept', 'global', 'global', 'superseded', %s, %s, 3)"
            ).format(table(migrated, "cron_skips")),
            (first, first + timedelta(hours=2)),
        )
    s = make_scheduler()
    s.prune("30d")
    assert [r["first_plan"] for r in spans(db, migrated, "kept")] == [recent]


def test_explain_of_a_whole_job_counts_its_scopes_runs_and_skips_per_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    p0, p1, p2, p3 = (past_plan(db, timedelta(minutes=m)) for m in (40, 30, 20, 10))
    scopes = [pgsched.Scope("tenant", str(n)) for n in range(3)]
    for scope in scopes[:2]:  # two scopes resume after p0 and supersede p1, p2
        done = db_now(db)
        insert_row(
            db,
            migrated,
            job_name="fan",
            scope_kind=scope.kind,
            scope_id=scope.id,
            plan_time=p0,
            status="SUCCESS",
            finished_at=done,
        )
    s = make_scheduler()
    s.register(lambda run: None, name="fan", planner=FixedPlans(p0, p1, p2, p3), scopes=scopes)
    assert s.run_once().succeeded == 3  # p3 for each; the third scope first seen at p3
    answer = s.admin.explain("fan", since=p0)
    assert answer.scope is None
    got = [(x.first_plan, x.statuses, x.skipped) for x in answer.lines]
    assert got == [
        (p0, {"SUCCESS": 2}, {}),
        (p1, {}, {"superseded": 2}),
        (p2, {}, {"superseded": 2}),
        (p3, {"SUCCESS": 3}, {}),
    ]
    one = s.admin.explain("fan", scopes[0], since=p0)
    assert [(x.state, x.reason, x.plans) for x in one.lines] == [
        ("ran", None, 1),
        ("skipped", "superseded", 2),
        ("ran", None, 1),
    ]
    fresh = s.admin.explain("fan", scopes[2], since=p0)
    assert [(x.state, x.reason) for x in fresh.lines] == [
        ("skipped", "before_first_sight"),
        ("ran", None),
    ]
    with pytest.raises(pgsched.NotFoundError, match="unknown job 'nope'"):
        s.admin.explain("nope")


def test_plans_a_calendar_excludes_are_recorded_excluded_and_explained(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    day = timedelta(days=1)
    p0, p1, p2 = (past_plan(db, n * day) for n in (4, 3, 2))
    p3 = past_plan(db, timedelta(minutes=10))  # on a later date than p2's, whatever the hour
    seed(db, migrated, "calendar", p0)
    closed = pgsched.Calendar(weekdays="mon-sun", exclude=[p1.date(), p2.date()])
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="calendar", planner=FixedPlans(p0, p1, p2, p3), calendar=closed)
    since = p0 - S

    def explained() -> list[tuple[str, str | None, int]]:
        return [
            (x.state, x.reason, x.plans) for x in s.admin.explain("calendar", since=since).lines
        ]

    # Before a claim passes them, explain derives them from the job's calendar (and no
    # replica has registered the job yet).
    unseen = ("skipped", "no_replica", 1)
    assert explained() == [("ran", None, 1), ("skipped", "excluded", 2), unseen]
    report = s.run_once()
    assert (report.succeeded, report.skipped) == (1, 2)
    assert [r.plan_time for r in recorder.runs] == [p3]
    ((span),) = spans(db, migrated, "calendar")
    assert (span["reason"], span["first_plan"], span["last_plan"], span["plans"]) == (
        "excluded",
        p1,
        p2,
        2,
    )
    assert explained() == [("ran", None, 1), ("skipped", "excluded", 2), ("ran", None, 1)]
    assert s.run_once().skipped == 0  # recorded once
