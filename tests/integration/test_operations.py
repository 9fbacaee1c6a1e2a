"""Operations (the Python API's methods; pause, trigger, limits, overlap) across replicas."""

from __future__ import annotations

import functools
import itertools
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from psycopg import sql

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import (
    count,
    db_now,
    floor_to,
    insert_row,
    row_by_id,
    rows,
    seed_running,
    table,
)
from tests.support.threads import Recorder, run_together, running, wait_for_fresh_tick
from tests.support.waiting import wait_until

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def paused_flag(db: Any, schema: str, job: str) -> bool | None:
    found = db.execute(
        sql.SQL("SELECT paused FROM {} WHERE job_name = %s").format(table(schema, "job_state")),
        (job,),
    ).fetchone()
    return None if found is None else bool(found[0])


def test_pause_on_one_replica_stops_claims_on_another(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    recorder = Recorder()
    s1, s2 = make_scheduler("s1"), make_scheduler("s2")
    for s in (s1, s2):
        s.register(recorder.enter, name="pausable", planner=FixedPlans(plan))

    s1.pause("pausable")
    assert paused_flag(db, migrated, "pausable") is True
    report = s2.run_once()
    assert report.started == 0
    assert rows(db, migrated) == []

    # PENDING rows of a paused job are not claimed either
    manual = s1.trigger("pausable").id
    assert manual is not None
    assert s2.run_once().started == 0
    assert row_by_id(db, migrated, manual)["status"] == "PENDING"

    s1.resume("pausable")
    assert paused_flag(db, migrated, "pausable") is False
    # the manual run, then the scheduled plan (overlap="forbid": one at a time per scope)
    reports = [s2.run_once(), s2.run_once()]
    assert [r.claimed for r in reports] == [1, 1], reports
    assert {r.trigger for r in recorder.runs} == {"schedule", "manual"}
    assert {r["runner_id"] for r in rows(db, migrated)} == {"s2"}
    assert {r["status"] for r in rows(db, migrated)} == {"SUCCESS"}


def test_pause_stops_a_running_replica(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    runner, operator = make_scheduler("runner", tick_interval=0.2), make_scheduler("operator")
    for s in (runner, operator):
        s.register(
            recorder.enter,
            name="ticking",
            every="1d",
            scopes=[pgsched.Scope("t", "1"), pgsched.Scope("t", "2")],
        )

    operator.pause("ticking")
    with running(runner):
        # a manual run for one scope, made while paused: must stay PENDING
        manual = operator.trigger("ticking", scope=pgsched.Scope("t", "2")).id
        assert manual is not None
        wait_for_fresh_tick(runner)
        assert len(recorder) == 0
        assert row_by_id(db, migrated, manual)["status"] == "PENDING"
        operator.resume("ticking")
        wait_until(lambda: count(db, migrated, "status = 'SUCCESS'") == 3, 10, "3 successes")
    assert sorted((r.scope.id, r.trigger) for r in recorder.runs) == [
        ("1", "schedule"),
        ("2", "manual"),
        ("2", "schedule"),
    ]


def test_trigger_inserts_a_pending_manual_run(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="manual", every="1d")
    assert s.run_once().claimed == 1  # the scheduled plan, out of the way

    before = db_now(db)
    ident = s.trigger("manual").id
    assert ident is not None
    after = db_now(db)
    row = row_by_id(db, migrated, ident)
    assert (row["status"], row["trigger"], row["attempt"]) == ("PENDING", "manual", 1)
    assert (row["scope_kind"], row["scope_id"]) == ("global", "global")
    assert before <= row["plan_time"] <= after, "trigger uses the database's now"
    assert s.trigger("manual").id == ident, "a second trigger returns the pending one"
    assert count(db, migrated) == 2

    report = s.run_once()
    assert (report.started, report.succeeded) == (1, 1)
    run = recorder.runs[-1]
    assert run.trigger == "manual"
    assert run.execution_id == ident
    assert run.plan_time == row["plan_time"]
    done = row_by_id(db, migrated, ident)
    assert (done["status"], done["trigger"], done["runner_id"]) == ("SUCCESS", "manual", "r1")

    # once it ran, a new trigger is a new run
    again = s.trigger("manual")
    assert again.created and again.id != ident
    assert again.id is not None
    s.run_once()
    assert row_by_id(db, migrated, again.id)["status"] == "SUCCESS"


def test_trigger_in_the_future_waits_and_cancel(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="later", every="1d")
    s.run_once()
    ran = len(recorder)

    at = db_now(db) + HOUR
    ident = s.trigger("later", at=at).id
    assert ident is not None
    row = row_by_id(db, migrated, ident)
    assert (row["status"], row["trigger"], row["plan_time"]) == ("PENDING", "manual", at)
    assert s.run_once().started == 0
    assert len(recorder) == ran
    now_run = s.trigger("later")
    assert now_run.created and now_run.id != ident, "a future trigger never holds a run-now"
    assert now_run.id is not None

    s.cancel(ident)
    cancelled = row_by_id(db, migrated, ident)
    assert cancelled["status"] == "CANCELLED"
    assert s.run_once().started == 1, "the run-now only"
    assert row_by_id(db, migrated, now_run.id)["status"] == "SUCCESS"
    with pytest.raises(pgsched.PgschedError):
        s.cancel(ident)
    assert row_by_id(db, migrated, ident)["status"] == "CANCELLED"


def test_cancel_refuses_rows_that_are_not_pending(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(lambda run: None, name="done", every="1d")
    s.run_once()
    (finished,) = rows(db, migrated)
    assert finished["status"] == "SUCCESS"
    with pytest.raises(pgsched.PgschedError):
        s.cancel(finished["id"])
    assert row_by_id(db, migrated, finished["id"]) == finished

    live = seed_running(db, migrated, "done", finished["plan_time"] - DAY, stale_in=HOUR)
    with pytest.raises(pgsched.PgschedError):
        s.cancel(live["id"])
    assert row_by_id(db, migrated, live["id"])["status"] == "RUNNING"

    with pytest.raises(pgsched.PgschedError):
        s.cancel(uuid.uuid4())


def test_backfill_inserts_pending_rows_and_runs_them_oldest_first(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    scopes = [pgsched.Scope("s", "a"), pgsched.Scope("s", "b")]
    recorder = Recorder()
    s = make_scheduler(max_concurrency=3)
    s.register(recorder.enter, name="history", every="1h", scopes=scopes)
    plan = floor_to(db_now(db), HOUR)
    existing = insert_row(
        db,
        migrated,
        job_name="history",
        scope_kind="s",
        scope_id="a",
        plan_time=plan - 3 * HOUR,
        status="SUCCESS",
        runner_id="seed",
    )

    inserted = s.backfill("history", plan - 5 * HOUR, plan - HOUR)
    assert inserted == 9  # 5 plans x 2 scopes, minus the existing one
    assert s.backfill("history", plan - 5 * HOUR, plan - HOUR) == 0
    assert row_by_id(db, migrated, existing["id"]) == existing
    pending = [r for r in rows(db, migrated) if r["status"] == "PENDING"]
    assert len(pending) == 9
    assert {r["trigger"] for r in pending} == {"backfill"}
    assert {r["plan_time"] for r in pending} == {plan - n * HOUR for n in range(1, 6)}

    first = s.run_once()  # overlap="forbid": one execution per scope at a time
    assert first.started == 2
    assert sorted((r.plan_time, r.scope.id) for r in recorder.runs) == [
        (plan - 5 * HOUR, "a"),
        (plan - 5 * HOUR, "b"),
    ]
    assert {r.trigger for r in recorder.runs} == {"backfill"}

    ticks = [list(recorder.runs)]
    for _ in range(6):
        if count(db, migrated, "status = 'PENDING'") == 0:
            break
        seen = len(recorder)
        s.run_once()
        ticks.append(recorder.runs[seen:])
    assert count(db, migrated, "status = 'PENDING'") == 0
    backfilled = [[r.plan_time for r in tick if r.trigger == "backfill"] for tick in ticks]
    flat = [p for tick in backfilled for p in tick]
    assert len(flat) == 9
    for earlier, later in itertools.pairwise(backfilled):
        if earlier and later:
            assert max(earlier) <= min(later), f"not oldest first: {backfilled}"
    keys = [(r.plan_time, r.scope) for r in recorder.runs if r.trigger == "backfill"]
    assert len(set(keys)) == 9

    # explicit scopes
    assert (
        s.backfill("history", plan - 2 * HOUR, plan - HOUR, scopes=[pgsched.Scope("x", "1")]) == 2
    )


def test_max_running_caps_a_job_across_replicas(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    scopes = [pgsched.Scope("slow", str(i)) for i in range(10)]
    recorder = Recorder()

    def slow(run: pgsched.Run) -> None:
        recorder.enter(run)
        time.sleep(0.3)
        recorder.leave()

    replicas = [make_scheduler(f"r{i}", max_concurrency=10, tick_interval=0.2) for i in range(2)]
    for s in replicas:
        s.register(slow, every="1d", scopes=scopes, max_running=2)

    peak_sql = 0

    def finished() -> bool:  # and the most RUNNING rows seen meanwhile
        nonlocal peak_sql
        if count(db, migrated, "status = 'SUCCESS'") >= 10:
            return True
        peak_sql = max(peak_sql, count(db, migrated, "status = 'RUNNING'"))
        return False

    with running(replicas[0]), running(replicas[1]):
        wait_until(finished, 30, "the 10 scopes to finish", interval=0.02)
    assert peak_sql <= 2, f"{peak_sql} RUNNING at once with max_running=2"
    assert recorder.peak <= 2
    assert peak_sql >= 1
    assert Counter(r.scope for r in recorder.runs) == Counter(scopes)


@pytest.mark.parametrize("overlap", ["forbid", "allow"])
def test_overlap_with_a_live_earlier_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, overlap: Literal["forbid", "allow"]
) -> None:
    a, b = pgsched.Scope("s", "a"), pgsched.Scope("s", "b")
    plan = floor_to(db_now(db), DAY)
    earlier = seed_running(db, migrated, "overlapping", plan - DAY, stale_in=HOUR, scope=a)
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="overlapping", every="1d", scopes=[a, b], overlap=overlap)

    report = s.run_once()
    ran = sorted(r.scope.id for r in recorder.runs)
    if overlap == "forbid":
        assert ran == ["b"]
        assert report.claimed == 1
    else:
        assert ran == ["a", "b"]
        assert report.claimed == 2
    assert {r.plan_time for r in recorder.runs} == {plan}
    assert row_by_id(db, migrated, earlier["id"]) == earlier, "a live lease is left alone"


def test_upcoming_lists_the_next_plans(make_scheduler: SchedulerFactory, migrated: str) -> None:
    s = make_scheduler()
    s.register(lambda run: None, name="hourly", every="1h")
    s.register(lambda run: None, name="weekday_nine", cron="0 9 * * 1-5", timezone="Europe/Berlin")
    after = datetime(2024, 3, 29, 7, 30, tzinfo=UTC)  # a Friday; DST starts on Sunday 31st
    assert s.upcoming("hourly", after, 3) == [
        datetime(2024, 3, 29, h, tzinfo=UTC) for h in (8, 9, 10)
    ]
    assert s.upcoming("weekday_nine", after, 2) == [
        datetime(2024, 3, 29, 8, tzinfo=UTC),  # 09:00 CET
        datetime(2024, 4, 1, 7, tzinfo=UTC),  # 09:00 CEST
    ]


def test_concurrent_triggers_make_one_pending_run(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    schedulers = [make_scheduler(f"op{i}") for i in range(8)]
    for s in schedulers:
        s.register(lambda run: None, name="button", every="1d")
    done = run_together([functools.partial(s.trigger, "button") for s in schedulers])
    ids = {t.id for t in done}
    assert len(ids) == 1, ids
    assert sum(t.created for t in done) == 1, "one call created it, the others were told"
    assert count(db, migrated, "status = 'PENDING'") == 1


def test_cancel_racing_a_claim_is_consistent(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler()
    rounds = [pgsched.Scope("round", str(i)) for i in range(5)]
    s.register(recorder.enter, name="racy", every="1d", scopes=rounds)
    s.run_once()  # the scheduled plans, out of the way
    for i in range(5):
        scope = rounds[i]
        ident = s.trigger("racy", scope=scope).id
        assert ident is not None

        def cancel(ident: uuid.UUID = ident) -> str:
            try:
                s.cancel(ident)
                return "cancelled"
            except pgsched.PgschedError:
                return "refused"

        outcome, report = run_together([cancel, s.run_once])
        ran = [r for r in recorder.runs if r.scope == scope and r.trigger == "manual"]
        status = row_by_id(db, migrated, ident)["status"]
        if outcome == "cancelled":
            assert (status, len(ran), report.started) == ("CANCELLED", 0, 0)
        else:
            assert (status, len(ran), report.started) == ("SUCCESS", 1, 1)
