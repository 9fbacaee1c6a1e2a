"""The live replicas (``replicas()``), jobs that go away (``forget``) and scopes that leave a
job's ``scopes``: the Python API against a real PostgreSQL."""

from __future__ import annotations

import asyncio
import socket
from datetime import timedelta
from typing import Any

import pytest
from psycopg import sql

import pgsched
from pgsched._facades.admin import Admin
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import rows, table
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration


def _ok(run: pgsched.Run) -> int:
    return 1


def _fake_replica(db: Any, schema: str, runner: str, jobs: list[str], expires_in: str) -> None:
    """A row as a replica that is not running here would have left."""
    db.execute(
        sql.SQL(
            "INSERT INTO {} (runner_id, host, version, jobs, http_address, started_at, seen_at,"
            " expires_at) VALUES (%s, 'elsewhere', '0.0.1', %s, NULL, now(), now(),"
            " now() + %s::interval)"
        ).format(table(schema, "replicas")),
        (runner, jobs, expires_in),
    )


def test_serving_replicas_are_listed_with_their_jobs_and_a_stopped_one_leaves(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str
) -> None:
    """Two serving replicas each have one row (runner, host, version, jobs); the one stopped
    cleanly removes its row while the other stays."""
    first, second = make_scheduler("first"), make_scheduler("second")
    first.register(_ok, name="alpha", every="1h")
    second.register(_ok, name="alpha", every="1h")
    second.register(_ok, name="beta", every="1h")

    async def scenario() -> tuple[list[pgsched.LiveReplica], list[pgsched.LiveReplica]]:
        serving = [asyncio.create_task(s.serve()) for s in (first, second)]
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            async with asyncio.timeout(30):  # a deadline: a failure, not a hang
                while len(both := await admin.replicas()) < 2:
                    await asyncio.sleep(0.05)
            first.stop()
            await asyncio.wait_for(serving[0], 30)
            left = await admin.replicas()
        second.stop()
        await asyncio.wait_for(serving[1], 30)
        return both, left

    both, left = asyncio.run(scenario())
    assert [r.runner_id for r in both] == ["first", "second"]
    assert [r.jobs for r in both] == [["alpha"], ["alpha", "beta"]]
    for r in both:
        assert r.host == socket.gethostname()
        assert r.version == pgsched.__version__
        assert r.http_address is None  # serve() without a port serves no HTTP
        assert r.started_at <= r.seen_at
    assert [r.runner_id for r in left] == ["second"]
    assert Admin(dsn=runtime_dsn, schema=migrated).replicas() == []


def test_a_replica_past_its_expiry_is_not_listed_and_its_row_is_removed(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    """A row not refreshed within its expiry (a replica that died) is hidden at once and
    deleted by the next registration of any replica; a live one stays."""
    _fake_replica(db, migrated, "dead", ["alpha"], "-1 second")
    _fake_replica(db, migrated, "alive", ["alpha"], "1 hour")
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    assert [r.runner_id for r in admin.replicas()] == ["alive"]
    s = make_scheduler("fresh")
    s.register(_ok, name="alpha", planner=FixedPlans())
    s.run_once()  # registers (then stops cleanly, removing its own row)
    left = db.execute(
        sql.SQL("SELECT runner_id FROM {} ORDER BY 1").format(table(migrated, "replicas"))
    ).fetchall()
    assert [r[0] for r in left] == ["alive"]


def test_forget_removes_a_job_no_replica_runs_and_keeps_its_history(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler("replica")
    s.register(_ok, name="gone", planner=FixedPlans(past_plan(db)))
    s.register(_ok, name="kept", planner=FixedPlans())
    assert s.run_once().succeeded == 1
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    assert {j.job for j in admin.status()} == {"gone", "kept"}
    admin.forget("gone")
    assert [j.job for j in admin.status()] == ["kept"]
    assert [r["status"] for r in rows(db, migrated, "gone")] == ["SUCCESS"]
    with pytest.raises(pgsched.NotFoundError, match="unknown job 'gone'"):
        admin.forget("gone")


def test_forget_is_refused_while_a_live_replica_registers_the_job(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    s = make_scheduler("replica")
    s.register(_ok, name="busy", planner=FixedPlans())
    s.run_once()
    _fake_replica(db, migrated, "still-running", ["busy"], "1 hour")

    async def attempt() -> None:
        async with pgsched.AsyncAdmin(runtime_dsn, schema=migrated) as admin:
            await admin.forget("busy")

    with pytest.raises(pgsched.PgschedError) as raised:
        asyncio.run(attempt())
    assert str(raised.value) == (
        "job 'busy' is still registered by live replica(s) still-running: remove it from"
        " their APP and restart them first"
    )
    assert [j.job for j in Admin(dsn=runtime_dsn, schema=migrated).status()] == ["busy"]


def test_a_scope_that_leaves_the_jobs_scopes_is_no_longer_planned(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """scopes() answered a and b for the first plan, then only a: the second plan gets a row
    for a alone, b's cursor is retired and its history stays."""
    first, second = past_plan(db, timedelta(minutes=1)), past_plan(db, -timedelta(seconds=2))
    answer = [pgsched.Scope("t", "a"), pgsched.Scope("t", "b")]
    s = make_scheduler("replica")
    s.register(_ok, name="fan", planner=FixedPlans(first, second), scopes=lambda now: list(answer))
    assert s.run_once().succeeded == 2
    answer.pop()
    wait_until(lambda: past_plan(db, timedelta(0)) > second, 10, "the second plan to fall due")
    s.run_once()
    got = sorted((r["scope_id"], r["plan_time"]) for r in rows(db, migrated, "fan"))
    assert got == [("a", first), ("a", second), ("b", first)]
    retired = db.execute(
        sql.SQL(
            "SELECT scope_id, retired_at IS NOT NULL FROM {}.cron_cursors ORDER BY scope_id"
        ).format(sql.Identifier(migrated))
    ).fetchall()
    assert retired == [("a", False), ("b", True)]


def test_status_shows_each_jobs_next_plan(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    """A job's next plan is the first plan its replica registered that is still ahead; a
    dynamic job's is its schedules' earliest; none once every registered plan has passed
    (no replica planned it since)."""
    ahead = past_plan(db, -timedelta(days=1))
    soon = past_plan(db, -timedelta(seconds=2))
    s = make_scheduler("replica")
    s.register(_ok, name="fixed", planner=FixedPlans(soon, ahead))
    s.register(_ok, name="passing", planner=FixedPlans(soon))
    s.register(_ok, name="tenants", dynamic=True)
    s.put_schedule("tenants", pgsched.Scope("t", "a"), every="1d")
    s.run_once()
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    jobs = {j.job: j for j in admin.status()}
    assert jobs["fixed"].next_plan == soon
    assert jobs["passing"].next_plan == soon
    assert jobs["tenants"].next_plan == jobs["tenants"].next_due is not None
    wait_until(lambda: past_plan(db, timedelta(0)) > soon, 10, "the soon plan to pass")
    # No replica has registered since: a job's second registered plan is its next one at once
    # (the gap until the next registration showed none), and one with no plan left has none.
    after = {j.job: j.next_plan for j in admin.status()}
    assert (after["fixed"], after["passing"]) == (ahead, None), after
    s.run_once()  # a running replica registers again every 10 s
    jobs = {j.job: j for j in admin.status()}
    assert jobs["fixed"].next_plan == ahead
    assert jobs["passing"].next_plan is None
    assert jobs["fixed"].to_json()["next_plan"] == ahead.isoformat()


def test_a_replica_that_stopped_renewing_is_gone_before_its_row_expires(
    make_scheduler: SchedulerFactory, migrated: str, runtime_dsn: str, db: Any
) -> None:
    """Live means renewed within three renewal intervals (the row's live_until; 30 s after
    seen_at for a row an earlier version wrote without it), not "not yet expired": forget
    then treats the stopped one as gone, and its row stays until its expiry."""
    s = make_scheduler("replica")
    s.register(_ok, name="orphan", planner=FixedPlans())
    s.run_once()
    for runner, seen, live_until in [
        ("stopped", "-5 seconds", "-1 second"),  # renewed, then killed
        ("renewing", "-1 second", "29 seconds"),
        ("old-version", "-10 seconds", None),
        ("old-stopped", "-40 seconds", None),
    ]:
        db.execute(
            sql.SQL(
                "INSERT INTO {} (runner_id, host, version, jobs, http_address, started_at,"
                " seen_at, expires_at, live_until) VALUES (%s, 'elsewhere', '0.0.1', %s, NULL,"
                " now(), now() + %s::interval, now() + interval '10 minutes',"
                " now() + %s::interval)"
            ).format(table(migrated, "replicas")),
            (runner, ["orphan"] if runner.endswith("stopped") else ["other"], seen, live_until),
        )
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    assert [r.runner_id for r in admin.replicas()] == ["old-version", "renewing"]
    admin.forget("orphan")  # only replicas gone register it
    assert "orphan" not in [j.job for j in admin.status()]
    count = db.execute(sql.SQL("SELECT count(*) FROM {}").format(table(migrated, "replicas")))
    assert count.fetchone() == (4,)  # shown gone, not removed before their expiry
