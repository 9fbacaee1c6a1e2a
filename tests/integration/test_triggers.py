"""Triggers through the Python API (issue 22's findings) against a real PostgreSQL: a run-now
and a one-off at a future instant are distinct, ``created`` says whether the call inserted the
row, an ended plan is refused, a scoped job needs a scope it has (as its code says, or as its
replicas planned it for an operator without the APP), and the job summary's last plan is the
latest scheduled or started one."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pytest

import pgsched
from pgsched import Admin, Scope
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import count, db_now, row_by_id
from tests.support.threads import Recorder, run_together

TENANTS = [Scope("tenant", "acme"), Scope("tenant", "beta")]


def test_future_trigger_never_swallows_a_run_now(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="flaky_sync", planner=FixedPlans(past_plan(db)))
    assert s.run_once().succeeded == 1
    at = db_now(db).replace(microsecond=0) + timedelta(days=3)

    later = s.trigger("flaky_sync", at=at)
    assert (later.created, later.status, later.plan_time, later.scope) == (
        True,
        "PENDING",
        at,
        pgsched.GLOBAL,
    )
    now = s.trigger("flaky_sync")
    assert now.created and now.id != later.id, "a future trigger never holds a run-now"
    assert later.id is not None
    held = s.trigger("flaky_sync")
    assert (held.id, held.created, held.status) == (now.id, False, "PENDING")
    same = s.trigger("flaky_sync", at=at)
    assert (same.id, same.created) == (later.id, False), "the same instant: the first one"

    assert s.run_once().started == 1, "the run-now runs; the one-off waits for its instant"
    assert [r.execution_id for r in recorder.runs if r.trigger == "manual"] == [now.id]
    assert row_by_id(db, migrated, later.id)["status"] == "PENDING"

    s.cancel(later.id)
    before = count(db, migrated)
    with pytest.raises(pgsched.PgschedError, match="already ended") as raised:
        s.trigger("flaky_sync", at=at)
    assert str(later.id) in str(raised.value) and "CANCELLED" in str(raised.value)
    assert count(db, migrated) == before, "nothing was queued"
    again = s.trigger("flaky_sync")
    assert again.created and again.id != now.id, "the run-now ran: a new one is queued"


def test_summary_last_plan_ignores_future_and_cancelled_triggers(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    plan = past_plan(db)
    s = make_scheduler()
    s.register(lambda run: None, name="flaky_sync", planner=FixedPlans(plan))
    assert s.run_once().succeeded == 1
    later = s.trigger("flaky_sync", at=db_now(db) + timedelta(days=400))
    assert later.id is not None
    s.cancel(later.id)
    s.trigger("flaky_sync", at=db_now(db) + timedelta(days=500))  # still PENDING, ahead
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    summary = {j.job: j for j in admin.status()}["flaky_sync"]
    assert (summary.last_plan, summary.last_status) == (plan, "SUCCESS")
    assert summary.pending == 1

    ran = s.trigger("flaky_sync")  # a manual run that started is the last plan
    s.run_once()
    summary = {j.job: j for j in admin.status()}["flaky_sync"]
    assert (summary.last_plan, summary.last_status) == (ran.plan_time, "SUCCESS")


def test_scoped_job_needs_a_scope_it_has(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler()
    s.register(
        recorder.enter, name="berlin_report", planner=FixedPlans(past_plan(db)), scopes=TENANTS
    )
    assert s.run_once().succeeded == 2  # registers the job and plans both tenants
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    for operator in (s, admin):  # the job's code, and what its replicas recorded
        before = count(db, migrated)
        with pytest.raises(pgsched.ConfigError, match=r"'berlin_report'.*all_scopes"):
            operator.trigger("berlin_report")
        with pytest.raises(pgsched.ConfigError, match="tenant:nobody"):
            operator.trigger("berlin_report", Scope("tenant", "nobody"))
        with pytest.raises(pgsched.ConfigError, match="not both"):
            operator.trigger("berlin_report", TENANTS[0], all_scopes=True)
        assert count(db, migrated) == before, "a refused trigger queues nothing"

    every = admin.trigger("berlin_report", all_scopes=True)
    assert sorted(t.scope for t in every) == sorted(TENANTS)
    assert all(t.created and t.status == "PENDING" for t in every)
    assert s.run_once().started == 2
    manual = [r.scope for r in recorder.runs if r.trigger == "manual"]
    assert sorted(manual) == sorted(TENANTS), "never a made-up global scope"
    assert count(db, migrated, "job_name = 'berlin_report' AND scope_kind = 'global'") == 0


def test_callable_scopes_are_checked_against_their_answer(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(
        lambda run: None,
        name="computed",
        planner=FixedPlans(past_plan(db)),
        scopes=lambda now: TENANTS[:1],
    )
    with pytest.raises(pgsched.ConfigError, match="tenant:beta"):
        s.trigger("computed", TENANTS[1])  # the code answers acme only
    assert s.run_once().succeeded == 1
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    assert admin.trigger("computed", TENANTS[0]).created
    with pytest.raises(pgsched.ConfigError, match="planned"):
        admin.trigger("computed", TENANTS[1])  # its replicas planned acme only


def test_global_job_refuses_another_scope(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(lambda run: None, name="plain", planner=FixedPlans(past_plan(db)))
    with pytest.raises(pgsched.ConfigError, match=r"'plain'.*global scope only"):
        s.trigger("plain", Scope("tenant", "acme"))
    listed = s.trigger("plain", all_scopes=True)
    assert [t.scope for t in listed] == [pgsched.GLOBAL]


def test_concurrent_run_nows_of_a_scope_make_one(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """One PENDING run-now per (job, scope), held by the trigger's scope lock since the ledger
    is partitioned (a partial unique index did before migration 14): eight operators pressing
    "run now" at once get the same row, and a future one-off stays a row of its own."""
    s = make_scheduler()
    s.register(lambda run: None, name="pressed", planner=FixedPlans(past_plan(db)))
    admins = [make_scheduler(f"op{i}") for i in range(8)]
    for a in admins:
        a.register(lambda run: None, name="pressed", planner=FixedPlans(past_plan(db)))
    results = run_together([functools.partial(a.trigger, "pressed") for a in admins])
    assert len({r.id for r in results}) == 1, results
    assert sum(r.created for r in results) == 1, results
    later = s.trigger("pressed", at=db_now(db) + timedelta(days=400))
    assert later.created and later.id != results[0].id
    assert count(db, migrated, "job_name = 'pressed' AND status = 'PENDING'") == 2
