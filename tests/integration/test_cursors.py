"""Cursors: each (job, scope) stores its next plan. First sight, an outage after it, the
upgrade from a ledger written by the earlier claim path, scopes that leave and come back,
concurrent replicas, and claims that never read the ledger's history. The real first-sight
rule throughout: marked ``first_sight``, so the default ``first_sight="next"`` applies."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from pgsched._planning.cursors import scope_digest
from pgsched._records import RUNNING_HORIZON, ClaimTerms, JobEntry, ReplicaEntry, Sighting
from pgsched._storage.statements import statements
from pgsched._storage.store import Store
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import db_now, estimated_rows, insert_due_cursors, insert_row, rows, table
from tests.support.threads import Recorder, run_together, running
from tests.support.waiting import wait_until

pytestmark = pytest.mark.first_sight


def _cursors(db: Any, schema: str, job: str) -> dict[str, dict[str, Any]]:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(
            sql.SQL("SELECT * FROM {} WHERE job_name = %s").format(table(schema, "cron_cursors")),
            (job,),
        )
        return {r["scope_id"]: r for r in cur.fetchall()}


def _wait_past(db: Any, plan: Any, what: str) -> None:
    wait_until(lambda: db_now(db) > plan, 15, what)


def test_first_deploy_of_a_weekday_job_does_not_run_a_plan_from_before_it(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """cron="0 9 * * 1-5" in Berlin, deployed whenever the test runs: the first plan is the
    one `upcoming` names (the first due at or after first sight), never an earlier one."""
    recorder = Recorder()
    s = make_scheduler("r1")
    s.register(recorder.enter, name="weekday", cron="0 9 * * 1-5", timezone="Europe/Berlin")
    s.run_once()
    (cur,) = _cursors(db, migrated, "weekday").values()
    seen = cur["first_seen_at"]
    tick = timedelta(seconds=1)
    (expected,) = s.upcoming("weekday", seen - tick - timedelta(microseconds=1), 1)
    assert cur["next_plan_time"] == expected or cur["last_plan_time"] == expected
    assert all(r["plan_time"] >= seen - tick for r in rows(db, migrated, "weekday"))
    assert all(run.plan_time >= seen - tick for run in recorder.runs)


def test_a_deploy_a_moment_after_a_plan_still_runs_it(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """A plan that fell due within the last tick interval counts at first sight; one older
    than that does not."""
    recent, old = past_plan(db, timedelta(seconds=1)), past_plan(db, timedelta(minutes=5))
    recorder = Recorder()
    s = make_scheduler("r1", tick_interval="10s")  # the tick: the window a plan counts within
    s.register(recorder.enter, name="recent", planner=FixedPlans(old, recent))
    s.register(recorder.enter, name="old", planner=FixedPlans(old))
    assert s.run_once().succeeded == 1
    assert [(r.job, r.plan_time) for r in recorder.runs] == [("recent", recent)]
    assert rows(db, migrated, "old") == []


def test_an_outage_after_first_sight_loses_nothing_under_every_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    ahead = past_plan(db, timedelta(0))
    first, second = ahead + timedelta(seconds=2), ahead + timedelta(seconds=3)
    plans = FixedPlans(first, second)
    options: dict[str, Any] = {
        "catch_up": "every_plan",
        "max_plans_per_tick": 5,
        "overlap": "allow",
    }
    seer = make_scheduler("seer")
    seer.register(lambda run: None, name="nightly", planner=plans, **options)
    assert seer.run_once().claimed == 0  # first sight: nothing due yet
    _wait_past(db, second + timedelta(seconds=1.5), "both plans to be more than a tick old")
    later = make_scheduler("later")  # every replica was down while both fell due
    later.register(lambda run: None, name="nightly", planner=plans, **options)
    assert later.run_once().succeeded == 2
    assert [r["plan_time"] for r in rows(db, migrated, "nightly")] == [first, second]


def test_a_scope_with_ledger_rows_and_no_cursor_resumes_after_its_latest_plan(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """The upgrade path: rows written by the earlier claim path, no cursor. Nothing before
    the latest is re-run or caught up; plans after it run. A plan an old replica claims
    while new replicas run (ON CONFLICT on the plan key) runs once, and moves the cursor."""
    p0, p1, p2 = (past_plan(db, timedelta(minutes=m)) for m in (30, 20, 10))
    ahead = past_plan(db, timedelta(0)) + timedelta(seconds=2)
    done = db_now(db)
    insert_row(db, migrated, job_name="legacy", plan_time=p1, status="SUCCESS", finished_at=done)
    recorder = Recorder()
    s = make_scheduler("new")
    options: dict[str, Any] = {
        "catch_up": "every_plan",
        "max_plans_per_tick": 5,
        "overlap": "allow",
    }
    s.register(recorder.enter, name="legacy", planner=FixedPlans(p0, p1, p2, ahead), **options)
    assert s.run_once().succeeded == 1
    assert [r.plan_time for r in recorder.runs] == [p2]
    # an old replica, still running during the rolling upgrade, claims the next plan first
    insert_row(db, migrated, job_name="legacy", plan_time=ahead, status="SUCCESS", finished_at=done)
    _wait_past(db, ahead + timedelta(milliseconds=100), "the next plan to fall due")
    assert s.run_once().claimed == 0
    assert [r.plan_time for r in recorder.runs] == [p2]
    cur = _cursors(db, migrated, "legacy")["global"]
    assert (cur["last_plan_time"], cur["next_plan_time"]) == (ahead, None)
    assert [r["plan_time"] for r in rows(db, migrated, "legacy")] == [p1, p2, ahead]


def test_a_scope_that_leaves_is_retired_and_comes_back_as_on_first_sight(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    ahead = past_plan(db, timedelta(0))
    first, second = ahead + timedelta(seconds=2), ahead + timedelta(seconds=3)
    answer = [pgsched.Scope("t", "a"), pgsched.Scope("t", "b")]
    s = make_scheduler("r1")
    s.register(
        lambda run: None, name="fan", planner=FixedPlans(first, second), scopes=lambda now: answer
    )
    s.run_once()
    seen_b = _cursors(db, migrated, "fan")["b"]["first_seen_at"]
    _wait_past(db, first, "the first plan to fall due")
    assert s.run_once().succeeded == 2
    answer.pop()
    s.run_once()
    assert _cursors(db, migrated, "fan")["b"]["retired_at"] is not None
    _wait_past(db, second + timedelta(seconds=1.5), "the second plan to be a tick old")
    answer.append(pgsched.Scope("t", "b"))
    s.run_once()
    back = _cursors(db, migrated, "fan")["b"]
    assert back["retired_at"] is None and back["first_seen_at"] > seen_b
    got = sorted((r["scope_id"], r["plan_time"]) for r in rows(db, migrated, "fan"))
    # a catches up on the second plan; b, back after it fell due, starts after it
    assert got == [("a", first), ("a", second), ("b", first)]


def _retired(db: Any, schema: str) -> dict[str, bool]:
    return {k: c["retired_at"] is not None for k, c in _cursors(db, schema, "fan").items()}


def _sighted(db: Any, schema: str, runner: str) -> bool:
    """Whether the replica has written its list of fan's scopes (its digest is in its row)."""
    query = sql.SQL("SELECT 1 FROM {} WHERE runner_id = %s AND scope_digests ? 'fan'")
    return db.execute(query.format(table(schema, "replicas")), (runner,)).fetchone() is not None


def test_a_rolling_update_that_changes_the_scopes_retires_nothing_until_replicas_agree(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Version 1 lists tenants a and x, version 2 lists a and y. While both run, neither
    retires the other's scopes, however often each starts; once version 1 is gone, version
    2's running replica writes its list again and x is retired."""
    a, x, y = (pgsched.Scope("t", i) for i in "axy")

    def start(stack: ExitStack, runner: str, scopes: list[pgsched.Scope]) -> None:
        s = make_scheduler(runner, replica_expiry="3s")  # rechecks its peers every second
        s.register(lambda run: None, name="fan", every="1h", scopes=scopes)
        stack.enter_context(running(s))
        wait_until(lambda: _sighted(db, migrated, runner), 15, f"{runner} to write its list")

    with ExitStack() as v2, ExitStack() as v1:
        start(v1, "v1-a", [a, x])
        start(v2, "v2-a", [a, y])
        assert _retired(db, migrated) == {"a": False, "x": False, "y": False}
        start(v1, "v1-b", [a, x])  # a version 1 replica starts again mid-rollout
        assert _retired(db, migrated) == {"a": False, "x": False, "y": False}
        v1.close()  # version 1 stops
        wait_until(lambda: _retired(db, migrated)["x"], 15, "x retired once the replicas agree")
        assert _retired(db, migrated) == {"a": False, "x": True, "y": False}


async def _waits_for_lock(conn: psycopg.AsyncConnection[Any], pid: int) -> bool:
    query = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
    row = await (await conn.execute(query, (pid,))).fetchone()
    return bool(row and row[0])


async def _opposite_changes_at_once(dsn: str, schema: str) -> dict[str, bool]:
    """Replica A goes from scopes {a, x} to {a, y} while replica B goes from {a, y} to
    {a, x}: A's write is held open (its transaction uncommitted) until B's has started."""
    store = Store(schema)
    one = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    other = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    async with one, other:
        now = await store.now(one)

        def seen(runner: str, ids: str) -> Sighting:
            keys = [("t", i) for i in ids]
            return Sighting(
                ["t"] * len(ids),
                list(ids),
                [now] * len(ids),
                now,
                "s",
                now,
                runner,
                scope_digest(keys),
            )

        for runner, ids in (("A", "ax"), ("B", "ay")):  # mid-rollout: they disagree
            entry = ReplicaEntry(
                runner, "h", "v", None, now, timedelta(minutes=5), timedelta(seconds=30)
            )
            await store.register_jobs(
                one, [JobEntry("fan", "every 1h", "static", None, 1)], [[]], entry
            )
            await store.sight_cursors(one, "fan", seen(runner, ids))
        async with one.transaction():
            await store.sight_cursors(one, "fan", seen("A", "ay"))
            b = asyncio.create_task(store.sight_cursors(other, "fan", seen("B", "ax")))
            # A commits once B's write has either ended or is waiting for a lock
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while not b.done() and not await _waits_for_lock(one, other.info.backend_pid):
                assert loop.time() < deadline, "B's write neither ended nor waited"
                await asyncio.sleep(0.02)
        await b
        query = sql.SQL("SELECT scope_id, retired_at IS NOT NULL FROM {} WHERE job_name = 'fan'")
        cur = await one.execute(query.format(table(schema, "cron_cursors")))
        return dict(await cur.fetchall())


def test_opposite_scope_changes_written_at_once_retire_nothing_either_lists(
    migrated: str, db_roles: Any
) -> None:
    """Two replicas write opposite changes of a job's scopes at the same moment: the second
    waits for the first, reads its list, and neither retires a scope the other lists."""
    retired = asyncio.run(_opposite_changes_at_once(db_roles.dsn("runtime"), migrated))
    assert retired == {"a": False, "x": False, "y": False}


def test_eight_replicas_claim_each_scope_once(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    scopes = [pgsched.Scope("tenant", str(i)) for i in range(60)]
    plan = past_plan(db, timedelta(0)) + timedelta(seconds=2)
    recorder = Recorder()
    schedulers = [make_scheduler(f"r{i}", max_concurrency=20) for i in range(8)]
    for s in schedulers:
        s.register(recorder.enter, name="fan", planner=FixedPlans(plan), scopes=scopes)
    # First sight, eight at once. On a loaded machine the plan, 2 s ahead when taken, may fall
    # due before this round ends (its claims then come in it): the claims of both rounds count.
    first = run_together([s.run_once for s in schedulers])
    assert len(_cursors(db, migrated, "fan")) == 60
    _wait_past(db, plan, "the plan to fall due")
    reports = first + run_together([s.run_once for s in schedulers])
    assert sum(r.claimed for r in reports) == 60, reports
    assert len(recorder) == 60
    assert sorted(r["scope_id"] for r in rows(db, migrated, "fan")) == sorted(s.id for s in scopes)


def test_claims_never_read_the_ledger_history(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Pruning (here: deleting) every row of a job re-opens no plan: the cursor remembers."""
    first = past_plan(db, timedelta(0)) + timedelta(seconds=2)
    recorder = Recorder()
    s = make_scheduler("r1")
    s.register(
        recorder.enter,
        name="hourly",
        planner=FixedPlans(first),
        catch_up="every_plan",
        max_plans_per_tick=3,
    )
    # First sight; on a loaded machine the plan, 2 s ahead when taken, may already be due in it.
    ran = s.run_once().succeeded
    _wait_past(db, first, "the plan to fall due")
    assert ran + s.run_once().succeeded == 1
    db.execute(sql.SQL("DELETE FROM {}").format(table(migrated)))
    restarted = make_scheduler("r2")
    restarted.register(
        recorder.enter,
        name="hourly",
        planner=FixedPlans(first),
        catch_up="every_plan",
        max_plans_per_tick=3,
    )
    assert restarted.run_once().claimed == 0
    assert len(recorder) == 1


def _terms(clock: datetime | None) -> ClaimTerms:
    return ClaimTerms(
        job="j", runner="r", stale_timeout=timedelta(minutes=5), reentry=False, forbid=True,
        max_attempts=1, clock=clock,
    )  # fmt: skip


def _due_read_plan(db: Any, schema: str, clock: datetime | None) -> str:
    text = statements()["due_cursors"].text
    query = sql.SQL("EXPLAIN " + text).format(schema=sql.Identifier(schema))
    params = {**_terms(clock).params(), "delay": timedelta(0), "limit": 100}
    return "\n".join(r[0] for r in db.execute(query, params).fetchall())


def test_the_due_read_goes_through_the_cursor_index(migrated: str, db: Any) -> None:
    """The claim's read of due cursors touches the cursors' due index and, for the overlap
    check, only RUNNING rows of the ledger (its partial index): never its history."""
    insert_due_cursors(db, migrated, 2000)
    db.execute(sql.SQL("ANALYZE {}").format(table(migrated, "cron_cursors")))
    plan = _due_read_plan(db, migrated, db_now(db))
    assert "cron_cursors_due_idx" in plan, plan
    assert "Seq Scan on cron_executions" not in plan, plan


def test_the_overlap_check_leaves_out_the_partitions_of_later_plans(migrated: str, db: Any) -> None:
    """No RUNNING row is planned after the clock it started at: a claim's check for one reads
    the partitions up to its tick's clock and an hour, not those made days ahead."""
    now = db_now(db)
    ensure = sql.SQL("SELECT {}(%s::timestamptz[])").format(
        sql.Identifier(migrated, "cron_ensure_partitions")
    )
    db.execute(ensure, ([now, now + timedelta(days=3)],))
    ahead = db.execute(
        sql.SQL("SELECT name FROM {} WHERE lo > %s").format(table(migrated, "cron_partitions")),
        (now + RUNNING_HORIZON,),
    ).fetchall()
    assert ahead, "a partition of later plans"
    bounded, unbounded = _due_read_plan(db, migrated, now), _due_read_plan(db, migrated, None)
    for (name,) in ahead:
        assert name not in bounded, bounded
        assert name in unbounded, unbounded


def test_a_claim_past_its_bound_waits_for_the_next_tick(migrated: str, db: Any) -> None:
    """A claim run more than an hour after its tick's clock (a process stopped and resumed)
    could miss a RUNNING row planned in between: its due read takes nothing."""
    insert_due_cursors(db, migrated, 3)
    text = sql.SQL(statements()["due_cursors"].text).format(schema=sql.Identifier(migrated))
    now = db_now(db)
    for clock, expected in ((now, 3), (now - 2 * RUNNING_HORIZON, 0)):
        params = {**_terms(clock).params(), "delay": timedelta(0), "limit": 100}
        assert len(db.execute(text, params).fetchall()) == expected, clock


def test_a_changed_schedule_moves_the_cursors_to_the_new_one(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """A daily job redeployed every second: its cursor, due tomorrow under the old schedule,
    is computed again at once (after its latest claimed plan, else from first sight)."""
    recorder = Recorder()
    daily = make_scheduler("old")
    daily.register(recorder.enter, name="changing", every="1d")
    daily.run_once()
    (before,) = _cursors(db, migrated, "changing").values()
    assert before["spec"] == "every 1d"
    secondly = make_scheduler("new")
    secondly.register(recorder.enter, name="changing", every="1s")
    wait_until(lambda: secondly.run_once().succeeded, 10, "a plan of the new schedule to run")
    (after,) = _cursors(db, migrated, "changing").values()
    assert after["spec"] == "every 1s"
    assert after["first_seen_at"] == before["first_seen_at"]
    newest = recorder.runs[-1].plan_time
    assert newest >= before["first_seen_at"] - timedelta(seconds=1)
    assert newest.microsecond == 0 and after["last_plan_time"] == newest


def test_a_first_sight_of_thousands_of_scopes_refreshes_the_planners_figures(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Claims planned on the figures of the empty table sorted every due cursor of a
    100,000-scope job to take the first 2,000: a sighting that writes thousands of cursors
    analyzes the table (a few scopes more do not). Only the table's owner may: a runtime
    role's sighting goes on without (the server skips it with a warning)."""
    runtime = make_scheduler("r1")
    runtime.register(lambda run: None, name="big", every="1h", scopes=_scopes(1_200))
    assert runtime.run_once().errors == 0
    assert estimated_rows(db, migrated, "cron_cursors") <= 0  # never analyzed
    owner = make_scheduler("r2", role="owner")
    owner.register(lambda run: None, name="few", every="1h", scopes=_scopes(10))
    owner.run_once()
    assert estimated_rows(db, migrated, "cron_cursors") <= 0
    owner.register(lambda run: None, name="many", every="1h", scopes=_scopes(1_500))
    assert owner.run_once().errors == 0
    assert estimated_rows(db, migrated, "cron_cursors") == 1_200 + 10 + 1_500


def _scopes(count: int) -> list[pgsched.Scope]:
    return [pgsched.Scope("t", str(i)) for i in range(count)]
