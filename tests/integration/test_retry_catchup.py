"""Retries and catch-up: same row, backoff, window, lateness."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import db_now, floor_to, insert_row, rows, table
from tests.support.threads import Recorder

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def retry_now(db: Any, schema: str) -> None:
    """Make every scheduled retry due (seeding: skips the backoff wait)."""
    db.execute(
        sql.SQL(
            "UPDATE {} SET next_retry_at = clock_timestamp() - interval '1 second' "
            "WHERE status = 'FAILED' AND next_retry_at IS NOT NULL"
        ).format(table(schema))
    )


def seed_success(db: Any, schema: str, job: str, plan: datetime, **columns: Any) -> dict[str, Any]:
    now = db_now(db)
    return insert_row(
        db,
        schema,
        job_name=job,
        plan_time=plan,
        status="SUCCESS",
        runner_id="seed",
        started_at=now,
        finished_at=now,
        **columns,
    )


def test_failing_handler_is_retried_on_the_same_row(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    recorder = Recorder()
    s = make_scheduler()

    @s.job(planner=FixedPlans(plan), max_attempts=3, retry_backoff=[])
    def flaky(run: pgsched.Run) -> None:
        recorder.enter(run)
        raise ValueError(f"attempt {run.attempt} failed")

    first = s.run_once()
    assert (first.claimed, first.failed) == (1, 1)
    (row,) = rows(db, migrated)
    assert (row["status"], row["attempt"], row["error_code"]) == ("FAILED", 1, "handler_error")
    assert row["next_retry_at"] is not None
    assert row["next_retry_at"] <= row["finished_at"] + timedelta(seconds=1), (
        "empty backoff: at once"
    )

    second = s.run_once()
    assert (second.retried, second.claimed, second.failed) == (1, 0, 1)
    (row2,) = rows(db, migrated)
    assert row2["id"] == row["id"] and row2["plan_time"] == row["plan_time"]
    assert (row2["status"], row2["attempt"]) == ("FAILED", 2)
    assert row2["next_retry_at"] is not None
    assert "attempt 2 failed" in row2["error_msg"]

    third = s.run_once()
    assert (third.retried, third.failed) == (1, 1)
    (row3,) = rows(db, migrated)
    assert row3["id"] == row["id"]
    assert (row3["status"], row3["attempt"], row3["error_code"]) == ("FAILED", 3, "handler_error")
    assert row3["next_retry_at"] is None, "no retry is left"

    assert s.run_once().started == 0
    assert [r.attempt for r in recorder.runs] == [1, 2, 3]
    assert {r.execution_id for r in recorder.runs} == {row["id"]}
    assert {r.plan_time for r in recorder.runs} == {row["plan_time"]}
    assert all(r.max_attempts == 3 for r in recorder.runs)
    assert len({r.lease_token for r in recorder.runs}) == 3, "a new lease token every attempt"
    fencing = [r.fencing_token for r in recorder.runs]
    assert fencing == sorted(fencing) and len(set(fencing)) == 3
    assert len(rows(db, migrated)) == 1


def test_retry_backoff_schedules_the_next_attempt(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    s = make_scheduler()

    @s.job(planner=FixedPlans(plan), max_attempts=4, retry_backoff=["10m", "1h"])
    def backoff(run: pgsched.Run) -> None:
        raise RuntimeError("nope")

    def next_delay() -> timedelta | None:
        (row,) = rows(db, migrated)
        if row["next_retry_at"] is None:
            return None
        # the failure was just written by the DB clock (normally milliseconds ago; 5 s guards
        # against an order-of-magnitude regression, not a performance claim: see bench/)
        assert abs(db_now(db) - row["finished_at"]) < timedelta(seconds=5)
        delay: timedelta = row["next_retry_at"] - row["finished_at"]
        return delay

    assert s.run_once().failed == 1
    delay = next_delay()
    assert delay is not None and abs(delay - timedelta(minutes=10)) < timedelta(seconds=1)
    assert s.run_once().started == 0, "not due yet"

    for expected in (HOUR, HOUR):  # retry_backoff[1], then the last entry repeats
        retry_now(db, migrated)
        assert s.run_once().retried == 1
        delay = next_delay()
        assert delay is not None and abs(delay - expected) < timedelta(seconds=1)
        assert s.run_once().started == 0

    retry_now(db, migrated)
    assert s.run_once().retried == 1
    (row,) = rows(db, migrated)
    assert (row["status"], row["attempt"], row["next_retry_at"]) == ("FAILED", 4, None)


def test_retry_backoff_one_hour_against_db_clock(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()

    @s.job(every="1d", max_attempts=2, retry_backoff=["1h"])
    def hourly_retry(run: pgsched.Run) -> None:
        raise RuntimeError("later")

    before = db_now(db)
    s.run_once()
    after = db_now(db)
    (row,) = rows(db, migrated)
    assert before + HOUR <= row["next_retry_at"] <= after + HOUR


def test_every_plan_catches_up_oldest_first(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    now = db_now(db)
    plan = floor_to(now, HOUR)
    seed_success(db, migrated, "catchup", plan - 5 * HOUR)
    recorder = Recorder()
    s = make_scheduler()

    @s.job(
        every="1h",
        catch_up="every_plan",
        catch_up_window="10h",
        max_plans_per_tick=3,
        overlap="allow",  # several plans of the scope in one tick
    )
    def catchup(run: pgsched.Run) -> None:
        recorder.enter(run)

    first = s.run_once()
    assert first.claimed == 3
    assert sorted(r.plan_time for r in recorder.runs) == [plan - n * HOUR for n in (4, 3, 2)]

    second = s.run_once()
    latest = floor_to(db_now(db), HOUR)
    expected_second: list[datetime] = []
    p = plan - HOUR
    while p <= latest and len(expected_second) < 3:
        expected_second.append(p)
        p += HOUR
    assert sorted(r.plan_time for r in recorder.runs[3:]) == expected_second
    assert second.claimed == len(expected_second)
    assert s.run_once().started == 0 or latest != plan  # done, unless an hour boundary passed
    stored = [r["plan_time"] for r in rows(db, migrated)]
    assert stored == sorted(set(stored))
    assert all(r["status"] == "SUCCESS" for r in rows(db, migrated))


def test_every_plan_under_forbid_runs_one_plan_of_a_scope_at_a_time(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """overlap="forbid" (the default): a catching-up scope runs its missed plans one after
    the other, oldest first, each claimed once the one before it has finished."""
    plan = floor_to(db_now(db), HOUR)
    seed_success(db, migrated, "serial", plan - 4 * HOUR)
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1h", catch_up="every_plan", catch_up_window="10h", max_plans_per_tick=3)
    def serial(run: pgsched.Run) -> None:
        recorder.enter(run)

    for n in (3, 2, 1):
        report = s.run_once()
        assert report.claimed == 1, report
        assert recorder.runs[-1].plan_time == plan - n * HOUR
    assert s.run_once().claimed == 1 and recorder.runs[-1].plan_time >= plan
    assert len(recorder) == 4


def test_every_plan_starts_a_new_scope_at_its_latest_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """A scope with no stored plan (a first deploy, a tenant new to the fan-out) starts at its
    latest due plan (the README's ``catch_up``); it does not replay the catch-up window."""
    tenants = ["old"]
    seeded = floor_to(db_now(db), HOUR) - 5 * HOUR
    seed_success(db, migrated, "fanout", seeded, scope_kind="tenant", scope_id="old")
    recorder = Recorder()
    s = make_scheduler(max_concurrency=100)

    @s.job(
        every="1h",
        catch_up="every_plan",
        catch_up_window="1d",
        max_plans_per_tick=100,
        overlap="allow",
        scopes=lambda now: [pgsched.Scope("tenant", t) for t in tenants],
    )
    def fanout(run: pgsched.Run) -> None:
        recorder.enter(run)

    tenants.append("new")
    s.run_once()
    latest = floor_to(db_now(db), HOUR)
    by_scope: dict[str, list[datetime]] = {}
    for r in recorder.runs:
        by_scope.setdefault(r.scope.id, []).append(r.plan_time)
    # The known scope catches up after its stored plan; the new one runs its latest plan only.
    assert sorted(by_scope["old"]) == [seeded + n * HOUR for n in range(1, 6)]
    assert by_scope["new"] == [latest]
    stored_new = [r["plan_time"] for r in rows(db, migrated) if r["scope_id"] == "new"]
    assert stored_new == [latest]


def test_every_plan_skips_plans_older_than_the_window(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = floor_to(db_now(db), HOUR)
    seed_success(db, migrated, "window", plan - 12 * HOUR)
    recorder = Recorder()
    s = make_scheduler()

    @s.job(
        every="1h",
        catch_up="every_plan",
        catch_up_window="10h",
        max_plans_per_tick=3,
        overlap="allow",
    )
    def window(run: pgsched.Run) -> None:
        recorder.enter(run)

    s.run_once()
    now = db_now(db)
    oldest_allowed = now - 10 * HOUR
    claimed = sorted(r.plan_time for r in recorder.runs)
    assert len(claimed) == 3
    # 5 s of slack for the tick's own duration (normally well under a second): a guard against
    # an order-of-magnitude regression, not a performance claim: those live in bench/
    assert all(p >= oldest_allowed - timedelta(seconds=5) for p in claimed), claimed
    # the oldest plan inside the window (P-9, or P-10 exactly at a boundary) comes first
    assert claimed[0] in (plan - 9 * HOUR, plan - 10 * HOUR)
    assert claimed == [claimed[0] + n * HOUR for n in range(3)]
    assert plan - 11 * HOUR not in [r["plan_time"] for r in rows(db, migrated)]


def test_latest_only_claims_the_latest_plan_and_counts_skipped(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = floor_to(db_now(db), HOUR)
    seed_success(db, migrated, "latest", plan - 5 * HOUR)
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1h")
    def latest(run: pgsched.Run) -> None:
        recorder.enter(run)

    report = s.run_once()
    latest_plan = floor_to(db_now(db), HOUR)
    assert report.claimed == 1
    (run,) = recorder.runs
    assert run.plan_time in (plan, latest_plan)
    missed = int((run.plan_time - (plan - 5 * HOUR)) / HOUR) - 1
    assert report.skipped == missed > 0
    assert [r["plan_time"] for r in rows(db, migrated)] == [plan - 5 * HOUR, run.plan_time]


def test_max_lateness_leaves_a_too_late_plan_unstarted(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # A daily plan at the hour three hours ago: its latest plan is 3 to 4 hours late, whatever
    # the time of day the test runs.
    now = db_now(db)
    latest = (now - 3 * HOUR).replace(minute=0, second=0, microsecond=0)
    recorder = Recorder()
    s = make_scheduler()

    @s.job(cron=f"0 {latest.hour} * * *", max_lateness="1h")
    def daily_late(run: pgsched.Run) -> None:
        recorder.enter(run)

    @s.job(cron=f"0 {latest.hour} * * *", max_lateness="400d")
    def daily_ok(run: pgsched.Run) -> None:
        recorder.enter(run)

    report = s.run_once()
    assert report.skipped >= 1
    assert [(r.job, r.plan_time) for r in recorder.runs] == [("daily_ok", latest)]
    assert [r["job_name"] for r in rows(db, migrated)] == ["daily_ok"]


def test_schedule_delay_shifts_the_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1h", schedule_delay="30m")
    def delayed(run: pgsched.Run) -> None:
        recorder.enter(run)

    before = db_now(db)
    s.run_once()
    after = db_now(db)
    (run,) = recorder.runs
    delay = timedelta(minutes=30)
    assert run.plan_time in (floor_to(before - delay, HOUR), floor_to(after - delay, HOUR))


def test_a_claim_rolled_back_at_commit_counts_no_skipped_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # A deferred constraint trigger on the cursors fails the first claim's COMMIT; once it is
    # dropped, the next claim decides the same plans again, and only its count stands.
    plan = floor_to(db_now(db), HOUR)
    seed_success(db, migrated, "latest", plan - 5 * HOUR)
    schema = sql.Identifier(migrated)
    db.execute(
        sql.SQL(
            "CREATE FUNCTION {s}.fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$"
            " BEGIN RAISE EXCEPTION 'commit refused (test)'; END $$;"
            " CREATE CONSTRAINT TRIGGER fail_commit AFTER UPDATE ON {s}.cron_cursors"
            " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.fail_commit();"
        ).format(s=schema)
    )
    registry = CollectorRegistry()
    recorder = Recorder()
    s = make_scheduler(registry=registry, role="superuser")

    @s.job(every="1h")
    def latest(run: pgsched.Run) -> None:
        recorder.enter(run)

    with pytest.raises(pgsched.PgschedError, match="tick failed"):
        s.run_once()
    assert recorder.runs == []
    superseded = {"job": "latest", "reason": "superseded"}
    assert registry.get_sample_value("pgsched_plans_skipped_total", superseded) is None
    db.execute(sql.SQL("DROP TRIGGER fail_commit ON {s}.cron_cursors").format(s=schema))
    report = s.run_once()
    (run,) = recorder.runs
    missed = int((run.plan_time - (plan - 5 * HOUR)) / HOUR) - 1
    assert (report.claimed, report.skipped) == (1, missed)
    assert registry.get_sample_value("pgsched_plans_skipped_total", superseded) == missed > 0
