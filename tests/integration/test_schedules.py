"""Schedules as data (docs/schedules.md) on a real PostgreSQL: the operations, their
validation and their semantics, and the claims of due schedules by several replicas."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from structlog.testing import capture_logs

import pgsched
from pgsched._storage.schedules import ScheduleStore
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import (
    count,
    db_now,
    estimated_rows,
    floor_to,
    insert_row,
    rewrite_after_read,
    rows,
    table,
)
from tests.support.threads import Recorder, run_together, running
from tests.support.waiting import wait_until

Scope = pgsched.Scope
JOB = "reminder"


def dynamic_scheduler(
    make_scheduler: SchedulerFactory,
    runner: str = "r1",
    job: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """A scheduler (``options``) with the dynamic job ``reminder`` (more options in ``job``)
    whose handler records its runs in ``scheduler.recorder``."""
    recorder = Recorder()
    options.setdefault("tick_interval", "0.2s")
    s: Any = make_scheduler(runner, **options)  # it carries the test's recorder

    def reminder(run: pgsched.Run) -> None:
        s.recorder.enter(run)  # looked up per run: a test may share one recorder
        s.recorder.leave()

    s.register(reminder, name=JOB, dynamic=True, **(job or {}))
    s.recorder = recorder
    return s


def schedules(db: psycopg.Connection[Any], schema: str) -> list[dict[str, Any]]:
    query = sql.SQL("SELECT * FROM {} ORDER BY scope_kind, scope_id").format(
        table(schema, "schedules")
    )
    with db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return cur.execute(query).fetchall()


def test_put_get_list_delete(make_scheduler: SchedulerFactory, migrated: str, db: Any) -> None:
    s = dynamic_scheduler(make_scheduler)
    before = db_now(db)
    put = s.put_schedule(
        JOB, Scope("user", "42"), cron="0 9 * * *", timezone="Europe/Berlin", payload={"t": "x"}
    )
    assert put.job == JOB and put.scope == Scope("user", "42")
    assert put.cron == "0 9 * * *" and put.every is None and put.timezone == "Europe/Berlin"
    assert put.payload == {"t": "x"} and not put.paused
    assert put.next_plan_time is not None and put.next_plan_time > before
    # 09:00 in Berlin: 08:00 UTC in winter, 07:00 UTC in summer.
    assert put.next_plan_time.minute == 0 and put.next_plan_time.hour in (7, 8)
    assert put.next_plan_time - before <= timedelta(days=1)
    assert s.get_schedule(JOB, Scope("user", "42")) == put

    for i in range(5):
        s.put_schedule(JOB, Scope("team", str(i)), every="1h")
    first = s.list_schedules(JOB, limit=2)
    assert [str(x.scope) for x in first] == ["team:0", "team:1"]
    second = s.list_schedules(JOB, after=first[-1].scope, limit=3)
    assert [str(x.scope) for x in second] == ["team:2", "team:3", "team:4"]
    third = s.list_schedules(JOB, after=second[-1].scope, limit=3)
    assert [str(x.scope) for x in third] == ["user:42"]

    assert s.delete_schedule(JOB, Scope("user", "42")) is True
    assert s.delete_schedule(JOB, Scope("user", "42")) is False
    assert s.get_schedule(JOB, Scope("user", "42")) is None
    with pytest.raises(pgsched.NotFoundError, match="no such schedule"):
        s.pause_schedule(JOB, Scope("user", "42"))


def test_identical_put_writes_nothing_and_payload_changes_keep_plan_times(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = dynamic_scheduler(make_scheduler)
    spec = pgsched.ScheduleSpec(Scope("user", "1"), every="1h", payload={"a": 1})
    assert s.put_schedules(JOB, [spec]) == 1
    stored = s.get_schedule(JOB, spec.scope)
    assert s.put_schedules(JOB, [spec]) == 0
    assert s.get_schedule(JOB, spec.scope) == stored  # not even updated_at moved

    changed = pgsched.ScheduleSpec(spec.scope, every="1h", payload={"a": 2}, paused=True)
    assert s.put_schedules(JOB, [changed]) == 1
    after = s.get_schedule(JOB, spec.scope)
    assert after.payload == {"a": 2} and after.paused
    assert after.next_plan_time == stored.next_plan_time
    assert after.updated_at > stored.updated_at


def test_replacing_the_spec_moves_the_next_plan_to_the_new_one(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = dynamic_scheduler(make_scheduler)
    s.put_schedule(JOB, Scope("user", "1"), every="7d")
    before = db_now(db)
    replaced = s.put_schedule(JOB, Scope("user", "1"), cron="*/5 * * * *", timezone="Asia/Tokyo")
    expected = floor_to(before, timedelta(minutes=5)) + timedelta(minutes=5)
    assert replaced.next_plan_time == expected


def test_invalid_input_names_the_field_and_writes_nothing(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = dynamic_scheduler(make_scheduler)
    good = [pgsched.ScheduleSpec(Scope("user", str(i)), every="1h") for i in range(3)]
    bad = pgsched.ScheduleSpec(Scope("user", "bad"), cron="61 * * * *")
    with pytest.raises(pgsched.ConfigError) as err:
        s.put_schedules(JOB, [*good, bad])
    assert "job 'reminder', scope user:bad: cron='61 * * * *'" in str(err.value)
    assert count(db, migrated, "true") == 0
    assert schedules(db, migrated) == []

    with pytest.raises(pgsched.ConfigError, match="given twice"):
        s.put_schedules(JOB, [*good, good[0]])
    cases: list[tuple[dict[str, Any], str]] = [
        ({"every": "1h", "cron": "* * * * *"}, "exactly one of"),
        ({}, "exactly one of"),
        ({"cron": "0 9 * * *", "timezone": "Mars/Base"}, "timezone='Mars/Base'"),
        ({"every": "-5m"}, "every"),
        ({"every": "1h", "payload": [1, 2]}, "payload=[1, 2] must be a JSON object"),
        ({"every": "1h", "payload": {"x": "y" * 20000}}, "the limit is 16384 bytes"),
        (
            {
                "every": "1h",
                "starts_at": datetime(2030, 1, 1, tzinfo=UTC),
                "ends_at": datetime(2029, 1, 1, tzinfo=UTC),
            },
            "ends_at=",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(pgsched.ConfigError, match=message.replace("[", r"\[")):
            s.put_schedule(JOB, Scope("user", "9"), **kwargs)
    assert schedules(db, migrated) == []


def test_an_unknown_field_names_job_scope_field_and_the_field_meant(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    s = dynamic_scheduler(make_scheduler)
    scope = Scope("user", "9")
    with pytest.raises(pgsched.ConfigError) as err:
        s.put_schedule(JOB, scope, cron="0 9 * * *", tz="Europe/Berlin")
    assert str(err.value) == (
        "job 'reminder', scope user:9: unknown field 'tz' (did you mean 'timezone'?)"
    )

    async def through_async_admin() -> str:
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            with pytest.raises(pgsched.ConfigError) as err:
                await admin.put_schedule(JOB, scope, evry="1h")  # type: ignore[arg-type]
            return str(err.value)

    assert asyncio.run(through_async_admin()) == (
        "job 'reminder', scope user:9: unknown field 'evry' (did you mean 'every'?)"
    )
    assert schedules(db, migrated) == []


def test_jobs_that_are_not_dynamic_are_refused(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    admin = pgsched.Admin(runtime_dsn, schema=migrated)
    with pytest.raises(pgsched.NotFoundError, match="no replica has registered it"):
        admin.put_schedule("ghost", Scope("user", "1"), every="1h")

    s = make_scheduler("r1")
    s.register(lambda run: None, name="coded", every="1h")
    with pytest.raises(pgsched.ConfigError, match="not registered as dynamic"):
        s.put_schedule("coded", Scope("user", "1"), every="1h")
    with pytest.raises(pgsched.ConfigError, match="not registered as dynamic"):
        s.put_schedule("ghost", Scope("user", "1"), every="1h")
    s.run_once()  # registers "coded" in job_state
    with pytest.raises(pgsched.ConfigError, match="is not dynamic"):
        admin.put_schedule("coded", Scope("user", "1"), every="1h")

    d = dynamic_scheduler(make_scheduler, "r2")
    d.run_once()  # registers the dynamic job: Admin may now put its schedules
    assert admin.put_schedule(JOB, Scope("user", "1"), every="1h").every == timedelta(hours=1)
    assert [x.scope for x in admin.list_schedules(JOB)] == [Scope("user", "1")]


def test_due_schedules_run_with_their_payload_each_plan_once(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    a = dynamic_scheduler(make_scheduler, "a")
    b = dynamic_scheduler(make_scheduler, "b")
    put_at = db_now(db)
    a.put_schedules(
        JOB,
        [
            pgsched.ScheduleSpec(Scope("user", str(i)), every="1s", payload={"user": i})
            for i in range(5)
        ],
    )
    with running(a), running(b):
        wait_until(lambda: len(a.recorder) + len(b.recorder) >= 15, 20, "15 runs of 5 schedules")
    runs = a.recorder.runs + b.recorder.runs
    keys = [(r.scope, r.plan_time) for r in runs]
    assert len(keys) == len(set(keys)), "a plan ran twice"
    for run in runs:
        assert run.payload == {"user": int(run.scope.id)}
        assert run.plan_time > put_at  # the first plan is strictly after the put
        assert run.trigger == "schedule"
    stored = {row["id"]: row for row in rows(db, migrated, JOB)}
    assert all(stored[r.execution_id]["payload"] == r.payload for r in runs)


def test_delete_and_replace_racing_claims(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Replicas claim every second while the application deletes one schedule and replaces
    another: after each change commits, no plan of the deleted schedule or of the replaced
    spec is claimed."""
    replicas = [dynamic_scheduler(make_scheduler, f"r{i}", tick_interval="0.1s") for i in range(4)]
    replicas[0].put_schedule(JOB, Scope("user", "gone"), every="1s")
    replicas[0].put_schedule(JOB, Scope("user", "moved"), every="1s")
    with running(replicas[0]), running(replicas[1]), running(replicas[2]), running(replicas[3]):
        wait_until(lambda: count(db, migrated, "scope_id = 'moved'") >= 2, 15, "two runs each")
        replicas[1].delete_schedule(JOB, Scope("user", "gone"))
        deleted_at = db_now(db)
        replicas[2].put_schedule(JOB, Scope("user", "moved"), cron="0 0 1 1 *")
        replaced_at = db_now(db)
        time.sleep(2.5)  # plans of the old spec would have fallen due twice by now
    late = [
        r
        for r in rows(db, migrated, JOB)
        if (r["scope_id"] == "gone" and r["created_at"] > deleted_at)
        or (r["scope_id"] == "moved" and r["created_at"] > replaced_at)
    ]
    assert late == []
    runs = [run for s in replicas for run in s.recorder.runs]
    keys = [(r.scope, r.plan_time) for r in runs]
    assert len(keys) == len(set(keys))
    assert count(db, migrated, "scope_id = 'gone'") >= 2  # history stays


def test_pause_across_replicas_then_resume_with_catch_up(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    a = dynamic_scheduler(make_scheduler, "a", tick_interval="0.1s")
    b = dynamic_scheduler(make_scheduler, "b", tick_interval="0.1s")
    scope = Scope("user", "p")
    a.put_schedule(JOB, scope, every="1s")
    with running(a), running(b):
        wait_until(lambda: count(db, migrated) >= 1, 10, "a first run")
        b.pause_schedule(JOB, scope)
        paused_at = db_now(db)
        assert a.get_schedule(JOB, scope).paused
        time.sleep(2.5)
        assert count(db, migrated, "created_at > %s", (paused_at,)) == 0
        a.resume_schedule(JOB, scope)
        resumed_at = db_now(db)
        wait_until(lambda: count(db, migrated, "created_at > %s", (resumed_at,)) >= 1, 10, "a run")
    after = [r for r in rows(db, migrated) if r["created_at"] > resumed_at]
    # latest_only: the plans missed while paused are skipped; the first run after resume is
    # the latest due plan, not one from the pause.
    assert min(r["plan_time"] for r in after) >= resumed_at - timedelta(seconds=1)


def test_triggers_and_backfills_carry_the_schedule_payload(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = dynamic_scheduler(make_scheduler)
    scope = Scope("user", "7")
    s.put_schedule(JOB, scope, cron="0 * * * *", payload={"name": "seven"})
    s.trigger(JOB, scope)
    end = floor_to(db_now(db), timedelta(hours=1))
    queued = s.backfill(JOB, end - timedelta(hours=2), end, [scope])
    assert queued == 3
    wait_until(lambda: (s.run_once(), len(s.recorder) >= 4)[1], 20, "4 runs")
    assert {r.trigger for r in s.recorder.runs} == {"manual", "backfill"}
    assert all(r.payload == {"name": "seven"} for r in s.recorder.runs)
    assert sorted(r.plan_time for r in s.recorder.runs if r.trigger == "backfill") == [
        end - timedelta(hours=2),
        end - timedelta(hours=1),
        end,
    ]
    with pytest.raises(pgsched.ConfigError, match="needs its scopes"):
        s.backfill(JOB, end - timedelta(hours=1), end)


def test_window_bounds_the_plans(make_scheduler: SchedulerFactory, migrated: str, db: Any) -> None:
    s = dynamic_scheduler(make_scheduler)
    now = db_now(db)
    later = floor_to(now, timedelta(hours=1)) + timedelta(days=3, minutes=30)
    future = s.put_schedule(JOB, Scope("user", "f"), every="1h", starts_at=later)
    assert future.next_plan_time == later + timedelta(minutes=30)
    # The window ends before the next plan: none is left.
    ended = s.put_schedule(JOB, Scope("user", "e"), every="1d", ends_at=now + timedelta(seconds=1))
    assert ended.next_plan_time is None
    # Moving starts_at earlier brings the next plan forward (window only: same spec).
    moved = s.put_schedule(JOB, Scope("user", "f"), every="1h")
    assert moved.next_plan_time == floor_to(db_now(db), timedelta(hours=1)) + timedelta(hours=1)


def test_eight_replicas_claim_ten_thousand_due_schedules_once_each(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    replicas = [dynamic_scheduler(make_scheduler, f"r{i}", max_concurrency=2000) for i in range(8)]
    for s in replicas[1:]:
        s.recorder = replicas[0].recorder  # one record of every run
    # Every schedule's next plan: the hour that has just begun, due at the same instant. Its
    # window ends at the next hour, so that hour is never a plan: the test may cross an hour
    # boundary (a run that began at 19:59:58 claimed 20:00 too) and still sees one plan each.
    hour = floor_to(db_now(db), timedelta(hours=1))
    specs = [
        pgsched.ScheduleSpec(Scope("user", str(i)), every="1h", ends_at=hour + timedelta(hours=1))
        for i in range(10_000)
    ]
    assert replicas[0].put_schedules(JOB, specs) == 10_000
    db.execute(
        sql.SQL("UPDATE {} SET next_plan_time = %s").format(table(migrated, "schedules")),
        (hour,),
    )
    recorder = replicas[0].recorder

    def all_ran() -> bool:  # else one more tick of every replica, at once
        if len(recorder) >= 10_000:
            return True
        run_together([s.run_once for s in replicas], timeout=120)
        return False

    wait_until(all_ran, 120, "10,000 schedules to run", interval=0)
    assert len(recorder) == 10_000
    keys = {(r.scope, r.plan_time) for r in recorder.runs}
    assert len(keys) == 10_000
    assert {r.plan_time for r in recorder.runs} == {hour}
    assert len({r.runner_id for r in recorder.runs}) >= 2
    nexts = {row["next_plan_time"] for row in schedules(db, migrated)}
    assert nexts == {None}  # every schedule moved past its one plan
    assert count(db, migrated, "status = 'SUCCESS'") == 10_000


def test_notify_wakes_replicas_within_a_second(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = dynamic_scheduler(make_scheduler, tick_interval="30s")
    scope = Scope("user", "n")
    with running(s):
        wait_until(lambda: s._runtime is not None and s._runtime.last_tick_ok, 10, "a tick")
        time.sleep(0.5)
        s.put_schedule(JOB, scope, every="1s")
        put_at = time.monotonic()
        # The replica ticks every 30 s: only the NOTIFY of the put (and the wake-up at the
        # next due plan it learns from the probe) gets the plan run this soon.
        wait_until(lambda: len(s.recorder) >= 1, 5, "the first plan")
    # Guard against an order-of-magnitude regression (normally a NOTIFY round trip, far under
    # 1 s; the failure it catches is waiting for the 30 s tick), not a performance claim:
    # those live in bench/.
    assert time.monotonic() - put_at < 5


def test_async_admin_offers_the_schedule_operations_as_coroutines(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    dynamic_scheduler(make_scheduler).run_once()  # a replica registers the dynamic job

    async def scenario() -> tuple[int, list[pgsched.Schedule], bool, Any]:
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            specs = [pgsched.ScheduleSpec(Scope("user", str(i)), every="1h") for i in range(3)]
            written = await admin.put_schedules(JOB, specs)
            await admin.pause_schedule(JOB, Scope("user", "1"))
            page = await admin.list_schedules(JOB, limit=10)
            deleted = await admin.delete_schedule(JOB, Scope("user", "2"))
            with pytest.raises(pgsched.ConfigError, match="payload"):
                await admin.put_schedule(
                    JOB,
                    Scope("user", "3"),
                    every="1h",
                    payload={1: 2},  # type: ignore[dict-item]  # the bad key under test
                )
            return written, page, deleted, await admin.get_schedule(JOB, Scope("user", "2"))

    written, page, deleted, gone = asyncio.run(scenario())
    assert written == 3 and deleted is True and gone is None
    assert [(s.scope.id, s.paused) for s in page] == [("0", False), ("1", True), ("2", False)]
    assert [s["scope_id"] for s in schedules(db, migrated)] == ["0", "1"]


def test_narrowing_the_window_moves_the_next_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = dynamic_scheduler(make_scheduler)
    scope = Scope("user", "w")
    first = s.put_schedule(JOB, scope, every="1h")
    assert first.next_plan_time is not None
    later = first.next_plan_time + timedelta(days=2, minutes=30)
    moved = s.put_schedule(JOB, scope, every="1h", starts_at=later)
    assert moved.next_plan_time == later + timedelta(minutes=30)
    ended = s.put_schedule(JOB, scope, every="1h", ends_at=first.next_plan_time)
    assert ended.next_plan_time is None


def test_a_bulk_put_refreshes_the_planners_figures(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Claims planned on the figures of the empty table hashed every schedule of the job
    twice per claim: a put that writes thousands of schedules analyzes the table (a few more
    do not). Only the table's owner may: a runtime role's put goes on without (the server
    skips it with a warning)."""

    def specs(kind: str, count: int) -> list[pgsched.ScheduleSpec]:
        return [pgsched.ScheduleSpec(Scope(kind, str(i)), every="1h") for i in range(count)]

    runtime = dynamic_scheduler(make_scheduler)
    assert runtime.put_schedules(JOB, specs("a", 1_200)) == 1_200
    assert estimated_rows(db, migrated, "schedules") <= 0  # never analyzed
    owner = dynamic_scheduler(make_scheduler, "r2", role="owner")
    assert owner.put_schedules(JOB, specs("b", 10)) == 10
    assert estimated_rows(db, migrated, "schedules") <= 0
    assert owner.put_schedules(JOB, specs("c", 1_500)) == 1_500
    assert estimated_rows(db, migrated, "schedules") == 1_200 + 10 + 1_500


def test_a_plan_that_already_has_a_row_moves_its_schedule_on(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """A due plan a backfill or trigger already ran is not claimed again, and the schedule
    still moves on past it (not left due on that plan forever)."""
    s = dynamic_scheduler(make_scheduler)
    scope = Scope("user", "9")
    s.put_schedule(JOB, scope, every="1h")
    plan = floor_to(db_now(db), timedelta(hours=1))
    moved_back = sql.SQL("UPDATE {} SET next_plan_time = %s WHERE scope_id = %s")
    db.execute(moved_back.format(table(migrated, "schedules")), (plan, "9"))
    insert_row(
        db,
        migrated,
        job_name=JOB,
        scope_kind="user",
        scope_id="9",
        plan_time=plan,
        trigger="backfill",
        status="SUCCESS",
    )
    s.run_once()
    assert s.recorder.runs == []  # that plan had its row: nothing claimed again
    assert s.get_schedule(JOB, scope).next_plan_time == plan + timedelta(hours=1)


def test_a_claim_that_finds_its_schedule_moved_since_its_read_rolls_back(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for a code-defined job's cursor (tests/integration/test_claims.py): a schedule found
    elsewhere than where due_schedules read it rolls the whole claim back with a warning,
    and the next claim takes the plan once."""
    s = dynamic_scheduler(make_scheduler)
    s.put_schedules(JOB, [pgsched.ScheduleSpec(Scope("user", "1"), every="1s")])
    (due,) = [
        r
        for (r,) in db.execute(
            sql.SQL("SELECT next_plan_time FROM {}").format(table(migrated, "schedules"))
        )
    ]
    wait_until(lambda: db_now(db) > due, 5, "the schedule's first plan to fall due")
    rewrite = sql.SQL("UPDATE {}.schedules SET payload = payload")
    read = rewrite_after_read(
        monkeypatch, ScheduleStore, "due_schedules", rewrite.format(sql.Identifier(migrated))
    )
    with capture_logs() as events:
        report = s.run_once()
    assert (report.claimed, report.errors, s.recorder.runs) == (0, 0, [])
    rolled = [(e["job"], e["unmoved"]) for e in events if e["event"] == "claim_rolled_back"]
    assert rolled == [(JOB, 1)]
    assert rows(db, migrated, JOB) == []
    monkeypatch.setattr(ScheduleStore, "due_schedules", read)
    report = s.run_once()
    assert (report.claimed, len(s.recorder.runs)) == (1, 1)
    assert [r["plan_time"] for r in rows(db, migrated, JOB)] == [s.recorder.runs[0].plan_time]


def test_the_dashboard_put_form_keeps_the_window(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """The dashboard's "Put a schedule" form builds the same request as the command line and
    the HTTP API: its starts_at and ends_at (a browser's datetime-local, read as UTC) are
    stored."""
    from pgsched._facades.http.actions import ActionForm
    from pgsched._operations.audit import Actor
    from pgsched._portal import PORTAL

    s = dynamic_scheduler(make_scheduler)
    form = {
        "action": ["schedule_put"],
        "job": [JOB],
        "scope": ["user:7"],
        "every": ["1h"],
        "timezone": [""],
        "starts_at": ["2030-01-02T03:04:05"],
        "ends_at": ["2031-01-01T00:00"],
        "paused": ["1"],
    }
    ops = s.admin.operations
    said = PORTAL.call(ActionForm(ops, Actor("dashboard", "test"), form).run())
    assert said == f"schedule user:7 of {JOB} saved"
    (row,) = schedules(db, migrated)
    assert row["starts_at"] == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert row["ends_at"] == datetime(2031, 1, 1, tzinfo=UTC)
    assert row["paused"] is True and row["timezone"] == "UTC"
    assert row["every_us"] == 3600 * 10**6


def test_a_named_calendar_skips_moves_and_records_the_plans_it_excludes(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    day = timedelta(days=1)
    today = floor_to(db_now(db), day)  # midnight UTC: the plans of every="1d"
    closed = pgsched.Calendar(
        weekdays="mon-sun",
        exclude=[(today - 2 * day).date(), (today - day).date(), (today + day).date()],
    )
    s = dynamic_scheduler(make_scheduler)
    s.calendar("closed", closed)
    s.calendar("closed", pgsched.Calendar(weekdays="mon-sun", exclude=closed.exclude))  # equal
    s.calendar("open", pgsched.Calendar(weekdays="mon-sun"))
    with pytest.raises(pgsched.ConfigError, match="calendar 'open': name is already registered"):
        s.calendar("open", pgsched.Calendar())
    scope = Scope("user", "1")

    # Refused with one line, and nothing stored.
    for given, message in [
        (
            {"calendar": "nope"},
            "calendar='nope' is not a registered calendar (registered: 'closed', 'open')",
        ),
        ({"on_excluded": "next_working_day"}, "on_excluded='next_working_day' needs calendar="),
        ({"calendar": "closed", "on_excluded": "monday"}, "on_excluded='monday' must be one of"),
    ]:
        with pytest.raises(pgsched.ConfigError) as refused:
            s.put_schedule(JOB, scope, every="1d", **given)
        assert str(refused.value).startswith(f"job {JOB!r}, scope user:1: {message}")
        assert "\n" not in str(refused.value)
    unknown_here = pytest.raises(pgsched.ConfigError, match="calendar='closed' is not known here")
    with pgsched.Admin(runtime_dsn, migrated) as without_code, unknown_here:
        without_code.put_schedule(JOB, scope, every="1d", calendar="closed")
    assert schedules(db, migrated) == []

    put = s.put_schedule(JOB, scope, every="1d", calendar="closed")
    assert (put.calendar, put.on_excluded) == ("closed", "skip")
    assert put.next_plan_time == today + 2 * day  # tomorrow is excluded
    # Claimed after an outage: its next plan was three days ago, and two plans since fell
    # on excluded days.
    db.execute(
        sql.SQL("UPDATE {} SET next_plan_time = %s, created_at = %s").format(
            table(migrated, "schedules")
        ),
        (today - 3 * day, today - 5 * day),
    )
    s.run_once()
    assert [r.plan_time for r in s.recorder.runs] == [today]
    skipped = sql.SQL(
        "SELECT reason, first_plan, last_plan, plans FROM {} WHERE job_name = %s"
        " ORDER BY first_plan"
    ).format(table(migrated, "cron_skips"))
    assert db.execute(skipped, (JOB,)).fetchall() == [
        ("superseded", today - 3 * day, today - 3 * day, 1),
        ("excluded", today - 2 * day, today - day, 2),
    ]
    assert s.get_schedule(JOB, scope).next_plan_time == today + 2 * day
    lines = s.admin.explain(JOB, scope, since=today - 3 * day - timedelta(seconds=1)).lines
    assert [(x.state, x.reason, x.plans) for x in lines][:3] == [
        ("skipped", "superseded", 1),
        ("skipped", "excluded", 2),
        ("ran", None, 1),
    ]

    # A calendar is part of the spec: another one re-plans the next plan.
    # (The day after the put's own: a put just past midnight is on a later day than `today`.)
    reopened = s.put_schedule(JOB, scope, every="1d", calendar="open")
    assert reopened.next_plan_time == floor_to(reopened.updated_at, day) + day

    # A weekly plan on tomorrow's weekday, tomorrow excluded: skipped to next week, or moved.
    weekly = f"0 0 * * {((today + day).weekday() + 1) % 7}"
    skip = s.put_schedule(JOB, Scope("user", "2"), cron=weekly, calendar="closed")
    moved = s.put_schedule(
        JOB, Scope("user", "3"), cron=weekly, calendar="closed", on_excluded="next_working_day"
    )
    assert (skip.next_plan_time, moved.next_plan_time) == (today + 8 * day, today + 2 * day)
