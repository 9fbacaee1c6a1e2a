"""The operator API in-process: ``Admin`` (what the command line calls), the retention job
``pgsched.prune``, and a Scheduler's Prometheus metrics (the README's "Python API", "Job
options" and "HTTP and metrics")."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import prometheus_client
import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql

import pgsched
from pgsched._facades.admin import Admin
from tests.integration.conftest import SchedulerFactory
from tests.support.net import free_port
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import count, db_now, floor_to, insert_row, row_by_id, rows, table
from tests.support.threads import Recorder
from tests.support.waiting import wait_until

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)


def _ok(run: pgsched.Run) -> int:
    return 1


def _boom(run: pgsched.Run) -> None:
    raise ValueError("boom")


@pytest.fixture
def admin(runtime_dsn: str, migrated: str) -> Admin:
    # Operator commands run as the least-privilege runtime role too (sql/roles.sql).
    return Admin(dsn=runtime_dsn, schema=migrated)


@pytest.fixture
def registered(make_scheduler: SchedulerFactory, migrated: str) -> pgsched.Scheduler:
    """A replica that has registered alpha and beta in job_state (one tick ran them)."""
    s = make_scheduler("replica")
    s.register(_ok, name="alpha", every="1h", max_attempts=3)
    s.register(_ok, name="beta", every="1h", scopes=[pgsched.Scope("t", "1")])
    assert s.run_once().succeeded == 2
    return s


def paused(db: Any, schema: str, job: str) -> bool | None:
    found = db.execute(
        sql.SQL("SELECT paused FROM {} WHERE job_name = %s").format(table(schema, "job_state")),
        (job,),
    ).fetchone()
    return None if found is None else bool(found[0])


def test_status_counts_per_job(
    admin: Admin, registered: pgsched.Scheduler, migrated: str, db: Any
) -> None:
    (first,) = rows(db, migrated, "alpha")
    p0, now = first["plan_time"], db_now(db)
    seeds: list[dict[str, Any]] = [
        dict(status="RUNNING", stale_after=now + HOUR),
        dict(status="RUNNING", stale_after=now - HOUR),
        dict(status="RUNNING", stale_after=now - HOUR),
        dict(status="FAILED", finished_at=now, error_code="handler_error"),
        dict(
            status="FAILED",
            finished_at=now,
            error_code="handler_error",
            max_attempts=2,
            next_retry_at=now + HOUR,
        ),
        dict(status="PENDING", trigger="backfill"),
        dict(status="CANCELLED", trigger="manual", finished_at=now),
    ]
    for n, cols in enumerate(seeds, start=1):
        insert_row(db, migrated, job_name="alpha", plan_time=p0 - n * HOUR, **cols)
    admin.pause("beta")

    summary = {r.job: r for r in admin.status()}
    assert set(summary) == {"alpha", "beta"}
    a, b = summary["alpha"], summary["beta"]
    assert (a.running, a.stale, a.failed, a.pending) == (1, 2, 1, 1)
    assert (a.last_plan, a.last_status) == (p0, "SUCCESS")
    assert a.last_success == first["finished_at"]
    assert a.schedule == "every 1h" and a.paused is False
    assert (b.running, b.stale, b.failed, b.pending) == (0, 0, 0, 0)
    assert b.paused is True and b.last_status == "SUCCESS"


def test_status_of_an_empty_schema_is_empty(admin: Admin) -> None:
    assert admin.status() == []


def test_runs_newest_first_and_filtered(
    admin: Admin, registered: pgsched.Scheduler, migrated: str, db: Any
) -> None:
    now = db_now(db)
    p0 = floor_to(now, HOUR)
    for n, status in enumerate(["SUCCESS", "FAILED", "SUCCESS", "CANCELLED"], start=1):
        insert_row(
            db,
            migrated,
            job_name="alpha",
            plan_time=p0 - n * HOUR,
            status=status,
            trigger="manual" if status == "CANCELLED" else "schedule",
            created_at=now - n * HOUR,
            finished_at=now - n * HOUR,
        )
    # Newest plan first, whatever the creation order: a backfill of a plan 40 days back
    # (another partition) made now comes last, a one-off planned ahead first; a job no
    # replica registers (no job_state row) is listed too.
    insert_row(
        db,
        migrated,
        job_name="beta",
        scope_kind="t",
        scope_id="1",
        plan_time=p0 - 40 * DAY,
        status="SUCCESS",
        trigger="backfill",
        finished_at=now,
    )
    ahead = insert_row(
        db, migrated, job_name="gone", plan_time=p0 + 3 * DAY, status="PENDING", trigger="manual"
    )
    everything = admin.runs(limit=100)
    assert len(everything) == count(db, migrated) == 8
    plans = [(r.plan_time, r.job) for r in everything]
    assert plans == sorted(plans, key=lambda p: p[0], reverse=True)
    assert everything[0].id == ahead["id"] and everything[-1].plan_time == p0 - 40 * DAY
    assert [r.id for r in admin.runs(limit=3)] == [r.id for r in everything[:3]]

    alpha = admin.runs(job="alpha")
    assert len(alpha) == 5 and {r.job for r in alpha} == {"alpha"}
    assert [r.plan_time for r in alpha] == [p0 - n * HOUR for n in range(5)]
    assert [r.status for r in admin.runs(status="failed")] == ["FAILED"]
    assert [r.status for r in admin.runs(job="beta", status="SUCCESS")] == ["SUCCESS"] * 2
    two = admin.runs(job="alpha", limit=2)
    assert [r.id for r in two] == [r.id for r in alpha[:2]]
    assert two[0].plan_time == p0  # the replica's own run is the newest
    with pytest.raises(pgsched.NotFoundError, match="no job named 'nobody'"):
        admin.runs(job="nobody")  # no record names it: a typo, not an empty history
    assert admin.runs(job="alpha", since=p0 + 400 * DAY) == []  # a known job's empty page

    with pytest.raises(pgsched.ConfigError, match="DONE"):
        admin.runs(status="DONE")
    with pytest.raises(pgsched.ConfigError, match="limit"):
        admin.runs(limit=0)


# (job, scope id) of rows that share one plan, inserted out of order
SHARED_PLAN = [
    ("alpha", 3),
    ("alpha", 1),
    ("beta", 2),
    ("alpha", 2),
    ("beta", 1),
    ("gamma", 9),
    ("gamma", 1),
]


def test_runs_page_by_keyset_across_the_scopes_of_one_plan(
    admin: Admin, registered: pgsched.Scheduler, migrated: str, db: Any
) -> None:
    # Seven scopes of three jobs share one plan time: pages of three end inside that plan, and
    # each goes on from the row after the last one, none repeated or lost.
    plan = floor_to(db_now(db), HOUR) + 2 * DAY
    seeded = {
        insert_row(
            db,
            migrated,
            job_name=job,
            scope_kind="t",
            scope_id=str(n),
            plan_time=plan,
            status="PENDING",
            trigger="manual",
        )["id"]
        for job, n in SHARED_PLAN
    }
    pages: list[list[pgsched.Execution]] = []
    after = None
    while True:
        page = admin.runs(limit=3, after=after)
        if not page:
            break
        pages.append(page)
        last = page[-1]
        after = (last.plan_time, last.job, last.scope)
    seen = [r.id for page in pages for r in page]
    assert len(seen) == len(set(seen)) == count(db, migrated)
    assert seeded <= set(seen)
    first = [(r.job, r.scope.id) for r in pages[0] + pages[1] + pages[2][:1]]
    assert first == [
        ("alpha", "1"),
        ("alpha", "2"),
        ("alpha", "3"),
        ("beta", "1"),
        ("beta", "2"),
        ("gamma", "1"),
        ("gamma", "9"),
    ]
    # A job's filter pages the same way; an after that is not a key is refused.
    alpha = admin.runs(job="alpha", limit=2, after=(plan, "alpha", pgsched.Scope("t", "1")))
    assert [r.scope.id for r in alpha] == ["2", "3"]
    with pytest.raises(pgsched.ConfigError, match="after"):
        admin.runs(after=(plan.replace(tzinfo=None), "alpha", pgsched.Scope("t", "1")))
    with pytest.raises(pgsched.ConfigError, match="after"):
        admin.runs(after=("alpha", plan))  # type: ignore[arg-type]


def test_trigger_and_cancel(
    admin: Admin, registered: pgsched.Scheduler, migrated: str, db: Any
) -> None:
    before = db_now(db)
    first = admin.trigger("alpha")
    after = db_now(db)
    assert isinstance(first, pgsched.Triggered) and first.created
    ident = first.id
    assert ident is not None
    row = row_by_id(db, migrated, ident)
    assert (row["status"], row["trigger"], row["scope_id"]) == ("PENDING", "manual", "global")
    assert before <= row["plan_time"] <= after
    second = admin.trigger("alpha")
    assert (second.id, second.created) == (ident, False), "a second trigger returns the first"
    assert count(db, migrated, "status = 'PENDING'") == 1

    at = datetime(2031, 5, 6, 7, 30, tzinfo=UTC)  # between two of beta's hourly plans
    later = admin.trigger("beta", pgsched.Scope("t", "1"), at=at).id
    assert later is not None
    row = row_by_id(db, migrated, later)
    assert (row["scope_kind"], row["scope_id"], row["plan_time"]) == ("t", "1", at)

    with pytest.raises(pgsched.NotFoundError, match="'ghost'"):
        admin.trigger("ghost")
    with pytest.raises(pgsched.ConfigError):
        admin.trigger("alpha", at=datetime(2031, 1, 1))  # naive
    assert count(db, migrated, "status = 'PENDING'") == 2

    # a replica runs the operator's trigger with the job's own max_attempts
    report = registered.run_once()
    assert report.claimed == 1, report
    done = row_by_id(db, migrated, ident)
    assert (done["status"], done["trigger"], done["runner_id"]) == ("SUCCESS", "manual", "replica")
    assert done["max_attempts"] == 3

    admin.cancel(later)
    cancelled = row_by_id(db, migrated, later)
    assert cancelled["status"] == "CANCELLED" and cancelled["finished_at"] is not None
    with pytest.raises(pgsched.PgschedError, match="PENDING"):
        admin.cancel(later)
    with pytest.raises(pgsched.PgschedError, match="SUCCESS"):
        admin.cancel(str(ident))
    assert row_by_id(db, migrated, ident)["status"] == "SUCCESS"
    with pytest.raises(pgsched.NotFoundError):
        admin.cancel(uuid.uuid4())
    with pytest.raises(pgsched.ConfigError, match="garbage"):
        admin.cancel("garbage")


def test_pause_and_resume(
    admin: Admin, registered: pgsched.Scheduler, migrated: str, db: Any
) -> None:
    admin.pause("alpha")
    assert paused(db, migrated, "alpha") is True
    assert paused(db, migrated, "beta") is False
    pending = admin.trigger("alpha").id
    assert pending is not None
    assert registered.run_once().started == 0, "a paused job is not claimed"
    assert row_by_id(db, migrated, pending)["status"] == "PENDING"

    admin.resume("alpha")
    assert paused(db, migrated, "alpha") is False
    assert registered.run_once().started == 1
    assert row_by_id(db, migrated, pending)["status"] == "SUCCESS"

    for action in (admin.pause, admin.resume):
        with pytest.raises(pgsched.NotFoundError, match="'ghost'"):
            action("ghost")
    assert paused(db, migrated, "ghost") is None


def test_admin_needs_a_database(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSCHED_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(pgsched.ConfigError, match="no database configured"):
        Admin().status()
    with pytest.raises(pgsched.ConfigError):
        Admin(dsn="postgresql://x@127.0.0.1/x", schema="")


def test_admin_works_inside_a_running_event_loop(
    admin: Admin, registered: pgsched.Scheduler
) -> None:
    async def from_async_code() -> list[str]:
        return [r.job for r in admin.status()]

    assert asyncio.run(from_async_code()) == ["alpha", "beta"]


def _seed_old_finished(db: Any, schema: str, job: str, scopes: int, plans: int) -> None:
    """``scopes`` x ``plans`` SUCCESS rows of ``job``, finished a day ago."""
    db.execute(
        sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status,"
            " finished_at)"
            " SELECT %(job)s, 's', s::text, %(t0)s + n * interval '1 hour', 'schedule',"
            " 'SUCCESS', clock_timestamp() - interval '1 day'"
            " FROM generate_series(1, %(scopes)s) AS s, generate_series(1, %(plans)s) AS n"
        ).format(table(schema)),
        {"job": job, "t0": datetime(2021, 1, 1, tzinfo=UTC), "scopes": scopes, "plans": plans},
    )


def test_prune(admin: Admin, migrated: str, db: Any) -> None:
    _seed_old_finished(db, migrated, "old", scopes=3, plans=400)  # more than one batch
    now = db_now(db)
    keep = [
        insert_row(db, migrated, job_name="old", plan_time=now - DAY, status="PENDING"),
        insert_row(
            db,
            migrated,
            job_name="old",
            plan_time=now - 2 * DAY,
            status="FAILED",
            max_attempts=2,
            next_retry_at=now + HOUR,
            finished_at=now - DAY,
        ),
        insert_row(
            db, migrated, job_name="old", plan_time=now - 3 * DAY, status="SUCCESS", finished_at=now
        ),
    ]
    assert admin.prune("1h") == 3 * 399
    assert count(db, migrated, "scope_kind = 's'") == 3, "each scope keeps its newest plan"
    assert {r["id"] for r in rows(db, migrated, "old") if r["scope_kind"] == "global"} == {
        r["id"] for r in keep
    }
    assert admin.prune(timedelta(hours=1)) == 0
    assert admin.prune(60) == 0
    for bad in ("soon", 0, "0s", -5, "-1d"):
        with pytest.raises(pgsched.ConfigError, match="older_than"):
            admin.prune(bad)


def test_retention_registers_and_runs_the_prune_job(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    _seed_old_finished(db, migrated, "old", scopes=2, plans=5)
    s = make_scheduler("keeper", retention="1s")
    assert "pgsched.prune" in s.jobs
    assert s.jobs["pgsched.prune"].recurrence.describe() == "every 1h"

    report = s.run_once()
    assert (report.claimed, report.succeeded) == (1, 1), report
    (prune_row,) = rows(db, migrated, "pgsched.prune")
    assert (prune_row["status"], prune_row["rows_affected"]) == ("SUCCESS", 8)
    assert count(db, migrated, "job_name = 'old'") == 2, "each scope keeps its newest plan"
    assert "pgsched.prune" in [r.job for r in admin.status()]
    assert s.run_once().claimed == 0, "hourly: nothing more this hour"

    with pytest.raises(pgsched.ConfigError, match="retention"):
        make_scheduler("bad", retention="soon")


def test_prune_never_lets_a_succeeded_plan_run_again(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    plan = past_plan(db)
    recorder = Recorder()
    first = make_scheduler("r1")
    first.register(recorder.enter, name="daily", planner=FixedPlans(plan))
    assert first.run_once().claimed == 1  # today's scheduled plan
    first.trigger("daily")
    assert first.run_once().claimed == 1  # an operator's manual run, later the same day
    assert [r.trigger for r in recorder.runs] == ["schedule", "manual"]

    # two days later, retention="1d" prunes (rows are dropped with their day's partition, or,
    # as here, where no partition of their own holds them, deleted)
    db.execute(
        sql.SQL(
            "UPDATE {} SET finished_at = finished_at - interval '2 days',"
            " plan_time = plan_time - interval '2 days'"
        ).format(table(migrated))
    )
    admin.prune("1d")
    # the scope's cursor remembers where it is: its newest scheduled row may go too
    assert rows(db, migrated, "daily") == []

    restarted = make_scheduler("r2")  # e.g. a replica restarted by a deploy
    restarted.register(recorder.enter, name="daily", planner=FixedPlans(plan))
    restarted.run_once()
    assert [r.trigger for r in recorder.runs] == ["schedule", "manual"], (
        "today's scheduled plan already succeeded and must not run again"
    )


# -- metrics ------------------------------------------------------------------------------


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_metrics_count_runs_and_claims(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    registry = CollectorRegistry()
    s = make_scheduler("metered", registry=registry)
    s.register(_ok, name="good", planner=FixedPlans(plan))
    s.register(_boom, name="bad", planner=FixedPlans(plan), max_attempts=2, retry_backoff=[])
    assert s.metrics.registry is registry

    # declared jobs export zero series from the start
    assert sample(registry, "pgsched_runs_total", job="good", status="success") == 0
    assert sample(registry, "pgsched_claims_total", job="bad", outcome="won") == 0

    report = s.run_once()
    assert (report.succeeded, report.failed) == (1, 1), report
    assert sample(registry, "pgsched_runs_total", job="good", status="success") == 1
    assert sample(registry, "pgsched_runs_total", job="good", status="failed") == 0
    assert sample(registry, "pgsched_runs_total", job="bad", status="failed") == 1
    assert sample(registry, "pgsched_runs_total", job="bad", status="success") == 0
    for job in ("good", "bad"):
        assert sample(registry, "pgsched_claims_total", job=job, outcome="won") == 1
        assert sample(registry, "pgsched_run_duration_seconds_count", job=job) == 1
    assert sample(registry, "pgsched_tick_duration_seconds_count") == 1

    # the failed plan is retried at once (empty backoff); the good one is done for the hour
    report = s.run_once()
    assert (report.claimed, report.retried) == (0, 1), report
    assert sample(registry, "pgsched_claims_total", job="bad", outcome="retry") == 1
    assert sample(registry, "pgsched_claims_total", job="bad", outcome="won") == 1
    assert sample(registry, "pgsched_runs_total", job="bad", status="failed") == 2
    assert sample(registry, "pgsched_claims_total", job="good", outcome="won") == 1

    s.trigger("good")
    s.run_once()
    assert sample(registry, "pgsched_claims_total", job="good", outcome="won") == 2
    assert sample(registry, "pgsched_runs_total", job="good", status="success") == 2
    assert sample(registry, "pgsched_tick_duration_seconds_count") == 3


def test_two_schedulers_in_one_process_do_not_clash(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    s1 = make_scheduler("m1")
    s2 = make_scheduler("m2", retention="1d")
    s3 = pgsched.Scheduler(dsn=s1.dsn, schema=migrated, runner_id="m3", retention="1d")
    for s in (s1, s2, s3):
        s.register(_ok, name="same", planner=FixedPlans(plan))
    registries = {id(s.metrics.registry) for s in (s1, s2, s3)}
    assert len(registries) == 3, "each Scheduler has a registry of its own"
    assert (
        prometheus_client.REGISTRY.get_sample_value(
            "pgsched_runs_total", {"job": "same", "status": "success"}
        )
        is None
    ), "nothing is registered in the global default registry"

    assert s1.run_once().claimed == 1
    runs = "pgsched_runs_total"
    assert sample(s1.metrics.registry, runs, job="same", status="success") == 1
    assert sample(s2.metrics.registry, runs, job="same", status="success") == 0

    s2.trigger("same")
    assert s2.run_once().claimed == 2  # the manual run and the prune job
    assert sample(s2.metrics.registry, runs, job="same", status="success") == 1
    assert sample(s2.metrics.registry, runs, job="pgsched.prune", status="success") == 1
    assert sample(s1.metrics.registry, runs, job="same", status="success") == 1
    assert sample(s3.metrics.registry, runs, job="same", status="success") == 0


def test_start_lag_and_job_interval_metrics(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    registry = CollectorRegistry()
    s = make_scheduler(registry=registry)
    s.register(lambda run: 1, name="hourly", every="1h")
    s.register(lambda run: 1, name="weekday", cron="0 9 * * 1-5", timezone="Europe/Berlin")
    assert registry.get_sample_value("pgsched_job_interval_seconds", {"job": "hourly"}) == 3600
    weekday = registry.get_sample_value("pgsched_job_interval_seconds", {"job": "weekday"})
    assert weekday is not None and weekday >= 86400  # a day, or a weekend's gap
    s.unregister("hourly")
    s.unregister("weekday")
    # The lag of a plan the test chose (a new hourly plan when the test crosses the hour would
    # be a second observation).
    s.register(lambda run: 1, name="lagged", planner=FixedPlans(past_plan(db)))
    s.run_once()
    (row,) = rows(db, migrated, "lagged")
    expected = (row["started_at"] - row["plan_time"]).total_seconds()
    labels = {"job": "lagged"}
    assert registry.get_sample_value("pgsched_start_lag_seconds_count", labels) == 1
    observed = registry.get_sample_value("pgsched_start_lag_seconds_sum", labels)
    # + 1.0: claim to handler start, normally milliseconds; a guard against an
    # order-of-magnitude regression, not a performance claim: those live in bench/
    assert observed is not None and expected <= observed < expected + 1.0
    # A retry or a manual run is no start lag: still one observation after a trigger.
    s.trigger("lagged")
    s.run_once()
    assert registry.get_sample_value("pgsched_start_lag_seconds_count", labels) == 1


def _backends(db: Any, app: str) -> list[int]:
    return [
        r[0]
        for r in db.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s ORDER BY pid", (app,)
        ).fetchall()
    ]


def _named_admin(dsn: str, schema: str) -> tuple[Admin, str]:
    """An Admin whose sessions carry an application name of their own, and that name."""
    app = f"pgsched admin {uuid.uuid4().hex[:8]}"
    return Admin(dsn=dsn, schema=schema, app_name=app), app


def test_admin_keeps_one_connection_between_calls_and_close_ends_it(
    runtime_dsn: str, migrated: str, registered: pgsched.Scheduler, db: Any
) -> None:
    admin, app = _named_admin(runtime_dsn, migrated)
    admin.status()
    first = _backends(db, app)
    for _ in range(5):
        admin.status()
        admin.pause("alpha")
        admin.resume("alpha")
    assert len(first) == 1
    assert _backends(db, app) == first  # the same session served every call
    admin.close()
    wait_until(lambda: _backends(db, app) == [], 10, "the sessions to end")
    assert [s.job for s in admin.status()] == ["alpha", "beta"]  # a new one after close


def test_admin_replaces_a_kept_connection_the_server_ended(
    runtime_dsn: str, migrated: str, registered: pgsched.Scheduler, db: Any
) -> None:
    named, app = _named_admin(runtime_dsn, migrated)
    with named as admin:
        admin.status()
        [pid] = _backends(db, app)
        db.execute("SELECT pg_terminate_backend(%s)", (pid,))
        wait_until(lambda: pid not in _backends(db, app), 10, f"session {pid} to end")
        admin.pause("beta")  # checked before reuse: the dead one is dropped, not an error
        assert paused(db, migrated, "beta") is True
        [new] = _backends(db, app)
        assert new != pid


def test_admin_shared_by_threads_runs_their_calls_concurrently(
    runtime_dsn: str, migrated: str, registered: pgsched.Scheduler, db: Any
) -> None:
    import threading

    from pgsched._operations.connectors import KEEP_IDLE

    admin, app = _named_admin(runtime_dsn, migrated)
    errors: list[BaseException] = []
    jobs: list[list[str]] = []
    barrier = threading.Barrier(8)

    def work() -> None:
        barrier.wait()
        try:
            for _ in range(10):
                jobs.append([s.job for s in admin.status()])
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert len(jobs) == 80 and all(j == ["alpha", "beta"] for j in jobs)
    # The rest were closed when returned; a closed session's backend stays listed in
    # pg_stat_activity until its process has exited, so wait for that, with a deadline.
    wait_until(
        lambda: 1 <= len(_backends(db, app)) <= KEEP_IDLE,
        10,
        lambda: f"1 to {KEEP_IDLE} idle sessions, not {_backends(db, app)}",
    )
    admin.close()


def test_a_collected_admin_closes_the_connections_it_kept(
    runtime_dsn: str, migrated: str, registered: pgsched.Scheduler, db: Any
) -> None:
    import gc

    admin, app = _named_admin(runtime_dsn, migrated)
    admin.status()
    assert len(_backends(db, app)) == 1
    del admin
    gc.collect()
    # an Admin per request leaks nothing
    wait_until(lambda: _backends(db, app) == [], 10, "the sessions to end")


def test_an_unreachable_database_is_a_database_error_naming_the_host() -> None:
    """Admin and AsyncAdmin raise pgsched's own error, one line naming the host and never the
    password, with the driver's exception as its cause."""
    port = free_port()  # nothing listens there
    dsn = f"postgresql://postgres:Pw-secret-42@127.0.0.1:{port}/postgres"
    with Admin(dsn=dsn) as admin, pytest.raises(pgsched.DatabaseError) as sync_error:
        admin.status()

    async def aio() -> None:
        async with pgsched.AsyncAdmin(dsn, statement_timeout="1s") as admin:
            await admin.status()

    with pytest.raises(pgsched.DatabaseError) as async_error:
        asyncio.run(aio())
    for error in (sync_error.value, async_error.value):
        message = str(error)
        assert f"127.0.0.1:{port}" in message and "Pw-secret-42" not in message, message
        assert "\n" not in message
        assert isinstance(error.__cause__, psycopg.Error)
        assert isinstance(error, pgsched.PgschedError)
