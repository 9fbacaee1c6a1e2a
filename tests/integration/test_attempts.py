"""The history of every attempt (cron_attempts) and finding runs: ``run(id)`` on ``Admin``,
``AsyncAdmin`` and ``GET /api/runs/{id}``, and the filters of ``runs()``."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import timedelta
from typing import Any
from urllib.error import HTTPError
from urllib.request import urlopen

import pytest
from psycopg import sql

import pgsched
from pgsched._facades.admin import Admin
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import db_now, floor_to, insert_row, rows, seed_running, table
from tests.support.threads import running

DAY = timedelta(days=1)


@pytest.fixture
def admin(runtime_dsn: str, migrated: str) -> Admin:
    return Admin(dsn=runtime_dsn, schema=migrated)


def _third_time_lucky(make_scheduler: SchedulerFactory, db: Any) -> pgsched.Scheduler:
    """A replica whose job ``flaky`` fails on attempts 1 and 2 and succeeds on 3."""
    s = make_scheduler("replica-a")

    @s.job(planner=FixedPlans(past_plan(db)), max_attempts=3, retry_backoff=[])
    def flaky(run: pgsched.Run) -> int:
        if run.attempt < 3:
            raise ValueError(f"attempt {run.attempt} failed")
        return 7

    for _ in range(3):
        assert s.run_once().started == 1
    return s


def test_a_run_that_succeeded_on_its_third_attempt_keeps_the_two_failed_ones(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    _third_time_lucky(make_scheduler, db)
    (row,) = rows(db, migrated)
    found = admin.run(row["id"])

    assert (found.execution.status, found.execution.attempt) == ("SUCCESS", 3)
    assert [a.attempt for a in found.attempts] == [1, 2, 3]
    assert [a.status for a in found.attempts] == ["FAILED", "FAILED", "SUCCESS"]
    assert {a.runner_id for a in found.attempts} == {"replica-a"}
    fencing = [a.fencing_token for a in found.attempts]
    assert fencing == sorted(fencing) and len(set(fencing)) == 3
    assert fencing[-1] == row["fencing_token"]
    for a in found.attempts[:2]:
        assert a.error_code == "handler_error"
        assert a.error_msg == f"ValueError: attempt {a.attempt} failed"
        assert a.traceback is not None
        assert a.traceback.startswith("Traceback (most recent call last):")
        assert "in flaky" in a.traceback
        assert a.traceback.rstrip().endswith(f"ValueError: attempt {a.attempt} failed")
        assert a.started_at is not None and a.finished_at is not None
        assert a.started_at <= a.finished_at
    last = found.attempts[2]
    assert (last.error_code, last.traceback) == (None, None)

    as_json = found.to_json()
    assert as_json["id"] == str(row["id"]) and as_json["status"] == "SUCCESS"
    assert [a["attempt"] for a in as_json["attempts"]] == [1, 2, 3]
    assert "in flaky" in as_json["attempts"][0]["traceback"]


def test_the_final_failed_attempt_keeps_its_traceback(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    s = make_scheduler("replica-a")

    @s.job(planner=FixedPlans(past_plan(db)), max_attempts=1)
    def doomed(run: pgsched.Run) -> None:
        raise KeyError("no such thing")

    assert s.run_once().failed == 1
    (row,) = rows(db, migrated)
    (only,) = admin.run(row["id"]).attempts
    assert (only.attempt, only.status, only.error_code) == (1, "FAILED", "handler_error")
    assert only.traceback is not None and "in doomed" in only.traceback
    assert only.fencing_token == row["fencing_token"]


def test_a_stolen_lease_is_kept_as_an_attempt_of_the_dead_runner(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    plan = floor_to(db_now(db), DAY)
    old = seed_running(
        db, migrated, "stealable", plan, stale_in=-timedelta(seconds=5), runner_id="dead-one"
    )
    s = make_scheduler("thief")

    @s.job(every="1d", max_attempts=3, allow_stale_reentry=True)
    def stealable(run: pgsched.Run) -> int:
        return 1

    assert s.run_once().stolen == 1
    found = admin.run(old["id"])
    assert [(a.attempt, a.runner_id, a.status) for a in found.attempts] == [
        (1, "dead-one", "FAILED"),
        (2, "thief", "SUCCESS"),
    ]
    stolen = found.attempts[0]
    assert stolen.fencing_token == old["fencing_token"]
    assert stolen.error_code == "stale_timeout"
    assert stolen.error_msg is not None and "dead-one" in stolen.error_msg
    assert stolen.traceback is None


def test_a_stale_lease_closed_out_is_kept_as_an_attempt(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    plan = floor_to(db_now(db), DAY)
    old = seed_running(
        db,
        migrated,
        "closing",
        plan,
        stale_in=-timedelta(seconds=5),
        max_attempts=1,
        runner_id="dead-one",
    )
    s = make_scheduler("closer")

    @s.job(every="1d", max_attempts=1)
    def closing(run: pgsched.Run) -> int:
        return 1

    s.run_once()
    (only,) = admin.run(old["id"]).attempts
    assert (only.runner_id, only.status, only.error_code) == ("dead-one", "FAILED", "stale_timeout")


def test_a_run_abandoned_at_shutdown_is_kept_as_an_attempt(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    started, release = threading.Event(), threading.Event()
    s = make_scheduler("stopping", shutdown_grace=0.5, tick_interval=0.2)

    @s.job(every="1d", max_attempts=2, run_timeout="30s")
    def long_haul(run: pgsched.Run) -> None:
        started.set()
        release.wait(20)

    try:
        with running(s):
            assert started.wait(10)
    finally:
        release.set()
    (row,) = rows(db, migrated)
    (only,) = admin.run(row["id"]).attempts
    assert (only.runner_id, only.status, only.error_code) == ("stopping", "FAILED", "shutdown")
    assert only.fencing_token == row["fencing_token"] and only.traceback is None


def test_run_of_an_unknown_or_malformed_id(admin: Admin) -> None:
    with pytest.raises(pgsched.NotFoundError, match="does not exist"):
        admin.run(uuid.uuid4())
    with pytest.raises(pgsched.ConfigError, match="'nope' is not a UUID"):
        admin.run("nope")


def test_async_admin_run(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    _third_time_lucky(make_scheduler, db)
    (row,) = rows(db, migrated)

    async def read() -> pgsched.RunHistory:
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            return await admin.run(str(row["id"]))

    found = asyncio.run(read())
    assert [a.status for a in found.attempts] == ["FAILED", "FAILED", "SUCCESS"]


def test_http_run_by_id_and_the_pages_recent_failures(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = _third_time_lucky(make_scheduler, db)
    (row,) = rows(db, migrated)

    def get(path: str) -> tuple[int, str]:
        try:
            with urlopen(f"http://127.0.0.1:{s.http_port}{path}", timeout=10) as resp:
                return resp.status, resp.read().decode()
        except HTTPError as exc:
            return exc.code, exc.read().decode()

    async def serve_and_get() -> list[tuple[int, str]]:
        server = asyncio.create_task(s.serve(http_port=0))
        async with asyncio.timeout(30):  # a deadline: a failure, not a hang
            while s.http_port is None:
                await asyncio.sleep(0.02)
        paths = [f"/api/runs/{row['id']}", f"/api/runs/{uuid.uuid4()}", "/api/runs/nope", "/"]
        answers = [await asyncio.to_thread(get, p) for p in paths]
        s.stop()
        await asyncio.wait_for(server, 30)
        return answers

    found, unknown, malformed, page = asyncio.run(serve_and_get())
    assert found[0] == 200
    body = json.loads(found[1])
    assert body["id"] == str(row["id"]) and body["status"] == "SUCCESS"
    assert [a["status"] for a in body["attempts"]] == ["FAILED", "FAILED", "SUCCESS"]
    assert "ValueError: attempt 1 failed" in body["attempts"][0]["traceback"]
    assert unknown[0] == 404 and "does not exist" in json.loads(unknown[1])["error"]
    assert malformed[0] == 400 and "'nope' is not a UUID" in json.loads(malformed[1])["error"]

    # The execution succeeded, yet its two failed attempts stay under "Recent failures".
    assert page[0] == 200
    failures = page[1].split("Recent failures", 1)[1].split("Recent runs", 1)[0]
    assert "ValueError: attempt 1 failed" in failures
    assert "ValueError: attempt 2 failed" in failures
    assert failures.count("retried:") == 2 and "on attempt 3" in failures


def test_failed_attempts_lists_retried_and_final_failures(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    _third_time_lucky(make_scheduler, db)
    # A FAILED row with no kept attempt (written before version 8) of a job its replicas
    # registered, as every replica since version 2 did.
    db.execute(
        sql.SQL("INSERT INTO {} (job_name, schedule) VALUES ('legacy', 'every 1m')").format(
            table(migrated, "job_state")
        )
    )
    old = insert_row(
        db,
        migrated,
        job_name="legacy",
        plan_time=past_plan(db),
        status="FAILED",
        error_code="handler_error",
        error_msg="old failure",
        finished_at=db_now(db),
    )

    async def read() -> list[Any]:
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            return await admin.failed_attempts(limit=10)

    got = asyncio.run(read())
    assert [(f.job, f.attempt, f.latest) for f in got] == [
        ("legacy", 1, True),
        ("flaky", 2, False),
        ("flaky", 1, False),
    ]
    assert got[0].execution_id == old["id"] and got[0].error_msg == "old failure"
    assert {f.execution_status for f in got[1:]} == {"SUCCESS"}


def test_runs_filters_scope_and_plan_times(admin: Admin, migrated: str, db: Any) -> None:
    base = floor_to(db_now(db), DAY) - 10 * DAY
    for day in range(4):
        for scope in ("a", "b"):
            insert_row(
                db,
                migrated,
                job_name="sweep",
                scope_kind="t",
                scope_id=scope,
                plan_time=base + day * DAY,
                status="SUCCESS",
            )
    got = admin.runs(scope=pgsched.Scope("t", "a"), limit=100)
    assert len(got) == 4 and {str(r.scope) for r in got} == {"t:a"}
    window = admin.runs(job="sweep", since=base + DAY, until=base + 3 * DAY, limit=100)
    assert sorted({r.plan_time for r in window}) == [base + DAY, base + 2 * DAY]
    assert len(window) == 4
    assert admin.runs(scope=pgsched.Scope("t", "zzz")) == []
    with pytest.raises(pgsched.ConfigError, match=r"since=.* must come before until="):
        admin.runs(since=base + DAY, until=base)
    with pytest.raises(pgsched.ConfigError, match=r"since=.*timezone-aware"):
        admin.runs(since=base.replace(tzinfo=None))


def test_prune_removes_attempts_with_their_executions(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, admin: Admin
) -> None:
    _third_time_lucky(make_scheduler, db)
    (row,) = rows(db, migrated)
    attempts = table(migrated, "cron_attempts")
    assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(attempts)).fetchone()[0] == 2
    # A newer scheduled plan of the scope lets prune take the row.
    insert_row(db, migrated, job_name="flaky", plan_time=row["plan_time"] + DAY, status="SUCCESS")
    db.execute(
        sql.SQL(
            "UPDATE {} SET finished_at = finished_at - interval '2 days',"
            " plan_time = plan_time - interval '2 days'"
        ).format(table(migrated))
    )
    assert admin.prune("1d") >= 1
    assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(attempts)).fetchone()[0] == 0
