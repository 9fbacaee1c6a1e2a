"""A manual run never takes the place of a scheduled plan (issue 48), against a real
PostgreSQL: a trigger at an instant that is a scheduled plan of the scope adds nothing and
says so (from the job's code, from the recurrence its replicas recorded, from a dynamic job's
schedule), cancelling whatever a trigger returned leaves the scheduled run alone, a plan the
scope's cursor moved past can still be run by hand, an accepted trigger warns when no live
replica runs the job or its instant is past, and a PENDING row carries the job's
max_attempts for an operator without the job's code."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pgsched
from pgsched import Admin, Scope
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import count, db_now, floor_to, rows
from tests.support.threads import Recorder, running
from tests.support.waiting import wait_until

TENANTS = [Scope("tenant", "a"), Scope("tenant", "b")]
HOUR = timedelta(hours=1)


def _ok(run: pgsched.Run) -> None:
    return None


def _row_at(db: Any, schema: str, job: str, plan: datetime) -> dict[str, Any] | None:
    found = [r for r in rows(db, schema, job) if r["plan_time"] == plan]
    return found[0] if found else None


def test_cancelling_a_trigger_at_a_scheduled_plan_never_loses_that_plan(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler(tick_interval=0.2)
    s.register(recorder.enter, name="beat", every="2s")
    with running(s), Admin(dsn=runtime_dsn, schema=migrated) as admin:
        wait_until(lambda: rows(db, migrated, "beat"), 15, "beat's first scheduled run")
        plan = floor_to(db_now(db), timedelta(seconds=2)) + timedelta(seconds=6)
        for caller in (admin, s):  # an operator without the code, and the code's Scheduler
            done = caller.trigger("beat", at=plan)
            assert (done.created, done.scheduled_plan, done.plan_time) == (False, True, plan)
            if done.id is not None:
                caller.cancel(done.id)  # whatever the trigger returned: the plan must survive
        assert count(db, migrated, "trigger = 'manual'") == 0, "no manual row at the plan"

        def ran() -> dict[str, Any] | None:
            row = _row_at(db, migrated, "beat", plan)
            return row if row is not None and row["status"] == "SUCCESS" else None

        row = wait_until(ran, 20, f"beat's scheduled run of {plan}")
        assert row["trigger"] == "schedule", row
        again = admin.trigger("beat", at=plan)  # once it has a row, that row is the answer
        assert (again.id, again.status, again.created) == (row["id"], "SUCCESS", False)
        assert again.scheduled_plan


def test_an_operator_without_the_code_knows_the_recorded_plans(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(_ok, name="daily", cron="0 9 * * *", timezone="Europe/Berlin", max_attempts=2)
    s.register(_ok, name="fan", every="1h", scopes=TENANTS)
    s.run_once()  # registers the jobs as a replica does
    now = db_now(db)
    nine = datetime(now.year + 1, 7, 1, 7, tzinfo=now.tzinfo)  # 09:00 in Berlin (summer)
    with Admin(dsn=runtime_dsn, schema=migrated) as admin:
        covered = admin.trigger("daily", at=nine)
        assert (covered.created, covered.scheduled_plan, covered.id) == (False, True, None)
        one_off = admin.trigger("daily", at=nine + timedelta(minutes=1))
        assert one_off.created and not one_off.scheduled_plan
        every = admin.trigger("fan", at=floor_to(now, HOUR) + 3 * HOUR, all_scopes=True)
        assert [(r.scope, r.created, r.scheduled_plan) for r in every] == [
            (t, False, True) for t in TENANTS
        ]
        between = admin.trigger("fan", TENANTS[0], at=floor_to(now, HOUR) + 3.5 * HOUR)
        assert between.created
    manual = [r for r in rows(db, migrated) if r["trigger"] == "manual"]
    assert sorted(r["plan_time"] for r in manual) == sorted(
        [nine + timedelta(minutes=1), floor_to(now, HOUR) + 3.5 * HOUR]
    )
    # the PENDING row carries the job's max_attempts as its replicas recorded it
    assert {r["job_name"]: r["max_attempts"] for r in manual} == {"daily": 2, "fan": 1}


def test_a_dynamic_jobs_schedule_covers_its_plans(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(_ok, name="remind", dynamic=True)
    s.run_once()
    user = Scope("user", "1")
    with Admin(dsn=runtime_dsn, schema=migrated) as admin:
        put = admin.put_schedule("remind", user, every="1h")
        assert put.next_plan_time is not None
        later = put.next_plan_time + 2 * HOUR
        covered = admin.trigger("remind", user, at=later)
        assert (covered.created, covered.scheduled_plan) == (False, True)
        assert admin.trigger("remind", user, at=later + timedelta(minutes=30)).created
    assert count(db, migrated, "trigger = 'manual'") == 1


def test_a_plan_the_cursor_moved_past_can_be_run_by_hand_with_a_warning(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(_ok, name="hourly", every="1h")
    s.run_once()  # first sight: plans from before it are no claim's (backfill or by hand)
    before = floor_to(db_now(db), HOUR) - 2 * HOUR
    with Admin(dsn=runtime_dsn, schema=migrated) as admin:
        done = admin.trigger("hourly", at=before)
    assert done.created and not done.scheduled_plan, done
    assert any("in the past" in w for w in done.warnings), done.warnings


def test_a_trigger_no_live_replica_will_run_is_accepted_with_a_warning(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler(tick_interval=0.2)
    s.register(_ok, name="solo", every="1h")
    s.run_once()  # registered, and its replica stopped cleanly: none is live
    with Admin(dsn=runtime_dsn, schema=migrated) as admin:
        alone = admin.trigger("solo")
        assert alone.created and any("no live replica" in w for w in alone.warnings), alone
        assert not {j.job: j for j in admin.status()}["solo"].live, "status says none runs it"
        assert alone.id is not None
        admin.cancel(alone.id)
        with running(s):
            wait_until(lambda: admin.replicas(), 15, "the replica's registration")
            served = admin.trigger("solo")
            assert {j.job: j for j in admin.status()}["solo"].live
        assert served.warnings == (), served.warnings
