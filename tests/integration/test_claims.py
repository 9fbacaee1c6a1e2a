"""Claims and limits: exactly one winner per plan, max_concurrency, fan-out."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest
from prometheus_client import CollectorRegistry
from psycopg import sql
from structlog.testing import capture_logs

import pgsched
from pgsched._engine.claims import EXISTING_SCOPE_LOCKS
from pgsched._records import ClaimTerms
from pgsched._storage.claims import ClaimStore
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import (
    count,
    db_now,
    floor_to,
    insert_due_cursors,
    insert_row,
    rewrite_after_read,
    rows,
    table,
)
from tests.support.threads import Recorder, run_together, running
from tests.support.waiting import wait_until


def test_eight_concurrent_claimers_have_exactly_one_winner(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()

    def contested(run: pgsched.Run) -> int:
        recorder.enter(run)
        time.sleep(0.05)
        recorder.leave()
        return 1

    schedulers = [make_scheduler(f"r{i}") for i in range(8)]
    for s in schedulers:
        s.register(contested, name="contested", every="1d")

    reports = run_together([s.run_once for s in schedulers])

    assert sum(r.claimed for r in reports) == 1, reports
    assert sum(r.started for r in reports) == 1, reports
    assert sum(r.succeeded for r in reports) == 1, reports
    assert len(recorder) == 1
    (row,) = rows(db, migrated, "contested")
    (run,) = recorder.runs
    assert row["status"] == "SUCCESS"
    assert row["id"] == run.execution_id
    assert row["runner_id"] == run.runner_id
    assert row["plan_time"] == run.plan_time
    assert row["attempt"] == 1

    # A plan that reached SUCCESS never runs again.
    again = run_together([s.run_once for s in schedulers])
    assert sum(r.started for r in again) == 0, again
    assert len(recorder) == 1
    assert count(db, migrated) == 1


def test_fan_out_of_200_scopes_over_three_replicas(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    scopes = [pgsched.Scope("tenant", str(i)) for i in range(200)]
    recorder = Recorder()
    per_runner_active: Counter[str] = Counter()
    per_runner_peak: Counter[str] = Counter()

    def fan(run: pgsched.Run) -> None:
        recorder.enter(run)
        with recorder.lock:
            per_runner_active[run.runner_id] += 1
            per_runner_peak[run.runner_id] = max(
                per_runner_peak[run.runner_id], per_runner_active[run.runner_id]
            )
        time.sleep(0.02)
        with recorder.lock:
            per_runner_active[run.runner_id] -= 1
        recorder.leave()

    schedulers = [make_scheduler(f"r{i}", max_concurrency=50) for i in range(3)]
    for s in schedulers:
        s.register(fan, name="fan", every="1d", scopes=scopes)
    reports: dict[str, list[pgsched.TickReport]] = {s.runner_id: [] for s in schedulers}

    def replica(s: pgsched.Scheduler) -> None:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:

            def finished() -> bool:  # else one more tick
                if count(conn, migrated, "status = 'SUCCESS'") >= 200:
                    return True
                reports[s.runner_id].append(s.run_once())
                return False

            wait_until(finished, 40, "the fan-out to finish", interval=0)

    run_together([functools.partial(replica, s) for s in schedulers], timeout=60)

    all_reports = [r for rs in reports.values() for r in rs]
    assert max(r.claimed for r in all_reports) <= 50, [r.claimed for r in all_reports]
    assert sum(r.started for r in all_reports) == 200
    assert sum(r.succeeded for r in all_reports) == 200
    assert max(per_runner_peak.values()) <= 50, per_runner_peak
    keys = [(r.scope, r.plan_time) for r in recorder.runs]
    assert len(keys) == 200 and len(set(keys)) == 200, "some plan/scope ran twice"
    stored = rows(db, migrated, "fan")
    assert len(stored) == 200
    assert {r["status"] for r in stored} == {"SUCCESS"}
    assert {r["scope_id"] for r in stored} == {s.id for s in scopes}
    assert len({r["plan_time"] for r in stored}) == 1


def test_max_concurrency_caps_one_tick(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    scopes = [pgsched.Scope("shard", f"{i:02d}") for i in range(20)]
    recorder = Recorder()
    s = make_scheduler(max_concurrency=5)

    @s.job(planner=FixedPlans(plan), scopes=scopes)
    def capped(run: pgsched.Run) -> None:
        recorder.enter(run)
        recorder.leave()

    report = s.run_once()
    assert report.claimed == 5
    assert report.succeeded == 5
    assert count(db, migrated) == 5
    report = s.run_once()
    assert report.claimed == 5
    assert count(db, migrated) == 10
    assert len({r.scope for r in recorder.runs}) == 10


class HeldTick:
    """One tick of ``scheduler`` whose handlers hold their slots until it has claimed every
    job (its duration is recorded when it ends): runs that ended within the tick would free
    slots, and a later job in the same tick may then rightly take them."""

    def __init__(self) -> None:
        self.recorder = Recorder()
        self._release = threading.Event()

    def handler(self, run: pgsched.Run) -> None:
        self.recorder.enter(run)
        self._release.wait(30)
        self.recorder.leave()

    def run(self, scheduler: pgsched.Scheduler) -> pgsched.TickReport:
        def ticks() -> float:
            sample = "pgsched_tick_duration_seconds_count"
            return scheduler.metrics.registry.get_sample_value(sample) or 0

        with ThreadPoolExecutor(1) as pool:
            done = pool.submit(scheduler.run_once)
            try:
                wait_until(lambda: ticks() >= 1 or done.done(), 30, "the tick to claim every job")
            finally:
                self._release.set()
            return done.result(60)


def test_max_concurrency_holds_across_jobs_and_priority_goes_first(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler(max_concurrency=5)
    scopes = [pgsched.Scope("shard", str(i)) for i in range(5)]
    held = HeldTick()
    s.register(held.handler, name="a_low", every="1d", scopes=scopes, priority=0)
    s.register(held.handler, name="z_high", every="1d", scopes=scopes, priority=10)
    report = held.run(s)
    claimed_jobs = Counter(r["job_name"] for r in rows(db, migrated))
    assert report.claimed <= 5, f"claimed {report.claimed} with max_concurrency=5: {claimed_jobs}"
    assert claimed_jobs == {"z_high": 5}, "the higher priority job should take the scarce slots"
    assert held.recorder.peak == 5


def test_a_backlog_of_one_job_leaves_the_others_of_its_priority_their_share(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Two jobs of one priority due at once, one with 12 scopes and one with 2, on 4 slots:
    each claims within its fair share (2), so the small one runs beside the backlog."""
    plan = past_plan(db)
    s = make_scheduler(max_concurrency=4)
    held = HeldTick()
    many = [pgsched.Scope("shard", f"{i:02d}") for i in range(12)]
    s.register(held.handler, name="a_backlog", planner=FixedPlans(plan), scopes=many)
    s.register(held.handler, name="b_small", planner=FixedPlans(plan), scopes=many[:2])
    held.run(s)
    assert Counter(r["job_name"] for r in rows(db, migrated)) == {"a_backlog": 2, "b_small": 2}
    # The small job's work is done: the backlog alone takes every slot.
    assert s.run_once().claimed == 4
    assert Counter(r["job_name"] for r in rows(db, migrated))["a_backlog"] == 6


def test_second_replica_claims_what_the_first_could_not(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    scopes = [pgsched.Scope("shard", str(i)) for i in range(6)]
    a, b = make_scheduler("a", max_concurrency=4), make_scheduler("b", max_concurrency=4)
    for s in (a, b):
        s.register(lambda run: None, name="split", planner=FixedPlans(plan), scopes=scopes)
    assert a.run_once().claimed == 4
    assert b.run_once().claimed == 2
    assert a.run_once().claimed == 0
    by_runner = Counter(r["runner_id"] for r in rows(db, migrated))
    assert by_runner == {"a": 4, "b": 2}
    wait_until(lambda: count(db, migrated, "status = 'SUCCESS'") == 6, 5, "6 successes")


def test_a_failing_job_does_not_orphan_the_claims_of_other_jobs(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # Seeding: the database refuses every claim of the job "broken".
    db.execute(
        sql.SQL(
            """
            CREATE FUNCTION {fn}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                IF NEW.job_name = 'broken' THEN RAISE EXCEPTION 'broken job refused'; END IF;
                RETURN NEW;
            END $$;
            CREATE TRIGGER refuse_broken BEFORE INSERT ON {tbl}
                FOR EACH ROW EXECUTE FUNCTION {fn}();
            """
        ).format(fn=sql.Identifier(migrated, "refuse_broken"), tbl=table(migrated))
    )
    recorder = Recorder()

    def slow(run: pgsched.Run) -> None:
        recorder.enter(run)
        # Still running when the tick's claim of "broken" fails: it must run to its end.
        time.sleep(0.3)

    s = make_scheduler()
    s.register(slow, name="healthy", every="1d", priority=10)
    s.register(recorder.enter, name="broken", every="1d", priority=0)

    with pytest.raises(pgsched.PgschedError):
        s.run_once()  # the tick fails: that is fine

    healthy = rows(db, migrated, "healthy")
    assert [r["status"] for r in healthy] in ([], ["SUCCESS"]), (
        f"healthy's claim was left {[r['status'] for r in healthy]} without running its handler "
        f"(handler runs: {[r.job for r in recorder.runs]})"
    )
    assert [r.job for r in recorder.runs] == ["healthy"] * len(healthy)


def test_eight_concurrent_claimers_never_overlap_a_forbid_scope(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """No job-wide lock: 8 replicas claim one overlap="forbid" job at once, on overlapping
    plans (new plans every second, several due per scope, backfilled PENDING rows and manual
    triggers of the same scopes); the handler outlasts the period. No two executions of a
    scope ever run at the same time, and no plan runs twice."""
    scopes = [pgsched.Scope("t", str(i)) for i in range(6)]
    lock = threading.Lock()
    spans: list[tuple[pgsched.Scope, float, float, datetime, str, str]] = []

    def slow(run: pgsched.Run) -> None:
        start = time.monotonic()
        time.sleep(0.15)
        with lock:
            spans.append(
                (run.scope, start, time.monotonic(), run.plan_time, run.trigger, run.runner_id)
            )

    replicas = [make_scheduler(f"r{i}", tick_interval=0.1, max_concurrency=4) for i in range(8)]
    for s in replicas:
        s.register(
            slow,
            name="exclusive",
            every="1s",
            scopes=scopes,
            overlap="forbid",
            catch_up="every_plan",
            catch_up_window="1m",
            max_plans_per_tick=3,
        )
    now = db_now(db)
    replicas[0].backfill("exclusive", now - timedelta(seconds=20), now - timedelta(seconds=2))
    for scope in scopes[:3]:
        replicas[1].trigger("exclusive", scope=scope)
    with contextlib.ExitStack() as stack:
        for s in replicas:
            stack.enter_context(running(s))
        wait_until(lambda: len(spans) >= 60, 60, "60 executions")
    by_scope: dict[pgsched.Scope, list[tuple[float, float, datetime, str, str]]] = {}
    for scope, start, end, plan, trigger, runner in spans:
        by_scope.setdefault(scope, []).append((start, end, plan, trigger, runner))
    for scope, intervals in by_scope.items():
        intervals.sort()
        for one, two in itertools.pairwise(intervals):
            assert two[0] >= one[1], f"{scope}: two executions overlapped: {one} and {two}"
    plans = Counter((s, p, t) for s, _, _, p, t, _ in spans if t != "manual")
    assert max(plans.values()) == 1, [k for k, n in plans.items() if n > 1]
    assert len(by_scope) == len(scopes)
    runners = {r["runner_id"] for r in rows(db, migrated) if r["status"] == "SUCCESS"}
    assert len(runners) > 1, runners  # the replicas did claim concurrently


def test_a_claim_blocked_by_another_unfinished_claim_gives_up_the_tick_then_claims(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    """Another replica's claim transaction holds the plan's row uncommitted (a replica cut off
    mid-claim): this replica's claim waits for it at most the claim lock timeout, gives up the
    tick without an error, and claims the plan once the other transaction is gone."""
    plan = past_plan(db)
    s = make_scheduler()
    s.register(lambda run: None, name="blocked", planner=FixedPlans(plan))
    with psycopg.connect(pg_dsn) as other:  # not autocommit: its insert stays uncommitted
        insert_row(
            other, migrated, job_name="blocked", plan_time=plan, status="RUNNING", runner_id="cut"
        )
        with capture_logs() as events:
            report = s.run_once()
        assert (report.claimed, report.errors) == (0, 0)
        blocked = [e for e in events if e["event"] == "claim_blocked"]
        assert [(e["job"], e["waited_s"]) for e in blocked] == [("blocked", 2.0)]
        other.rollback()
    report = s.run_once()
    assert (report.claimed, report.succeeded) == (1, 1)
    assert [r["plan_time"] for r in rows(db, migrated, "blocked")] == [plan]


# -- what keeps overlap="forbid" across a claim of due plans and a claim of existing rows ------


_TERMS = ClaimTerms(
    job="j",
    runner="r2",
    stale_timeout=timedelta(minutes=1),
    reentry=False,
    forbid=True,
    max_attempts=3,
)


async def _advisory_locks_of_a_due_claim(dsn: str, schema: str) -> tuple[int, int]:
    store = ClaimStore(schema)
    async with await psycopg.AsyncConnection.connect(dsn) as conn, conn.transaction():
        due = await store.due_cursors(conn, _TERMS, timedelta(0), 5_000)
        cur = await conn.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        )
        (held,) = await cur.fetchone()  # type: ignore[misc]
        return len(due), held


def test_a_claim_of_due_plans_takes_no_lock_per_scope(migrated: str, db: Any, pg_dsn: str) -> None:
    """Every scope's lock would sit in the server's shared lock table until commit (64 entries
    per connection by default, shared by every session): eight replicas claiming
    2,000 scopes each filled it. The cursors' row locks keep the scopes instead."""
    insert_due_cursors(db, migrated, 2_000)
    assert asyncio.run(_advisory_locks_of_a_due_claim(pg_dsn, migrated)) == (2_000, 0)


async def _retry_while_next_plan_is_claimed(dsn: str, schema: str) -> tuple[int, int]:
    store = ClaimStore(schema)
    async with (
        await psycopg.AsyncConnection.connect(dsn) as claiming,
        await psycopg.AsyncConnection.connect(dsn) as retrying,
    ):
        async with claiming.transaction():
            assert len(await store.due_cursors(claiming, _TERMS, timedelta(0), 10)) == 1
            async with retrying.transaction():
                while_held = len(await store.claim_existing(retrying, _TERMS, 10))
        async with retrying.transaction():
            after = len(await store.claim_existing(retrying, _TERMS, 10))
        return while_held, after


def test_a_retry_waits_while_its_scopes_next_plan_is_being_claimed(
    migrated: str, db: Any, pg_dsn: str
) -> None:
    """A scope's due retry and its next plan, claimed at once by two replicas: the retry's
    claim finds the scope's cursor row held and leaves the retry for a later tick (both
    checking for a RUNNING row at once could start both), then takes it."""
    insert_due_cursors(db, migrated, 1)
    insert_row(
        db,
        migrated,
        job_name="j",
        scope_kind="t",
        scope_id="1",
        plan_time=db_now(db) - timedelta(minutes=1),
        status="FAILED",
        attempt=1,
        max_attempts=3,
        next_retry_at=db_now(db) - timedelta(seconds=1),
    )
    assert asyncio.run(_retry_while_next_plan_is_claimed(pg_dsn, migrated)) == (0, 1)


def test_a_retry_storm_is_claimed_a_bounded_number_of_scopes_at_a_time(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """Every scope's retry due at once, under overlap="forbid": a claim takes at most
    EXISTING_SCOPE_LOCKS scopes (each holds a lock in the server's shared lock table until
    commit), the next claim the rest."""
    scopes = [pgsched.Scope("t", str(i)) for i in range(EXISTING_SCOPE_LOCKS + 40)]
    db.execute(
        sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt,"
            " max_attempts, next_retry_at) SELECT 'storm', 't', g::text, now() - interval '1h',"
            " 'schedule', 'FAILED', 1, 3, now() - interval '1s'"
            " FROM generate_series(0, %s - 1) g"
        ).format(table(migrated)),
        (len(scopes),),
    )
    s = make_scheduler("r1", max_concurrency=2_000)
    s.register(lambda run: None, name="storm", every="1d", scopes=scopes, max_attempts=3)
    assert s.run_once().retried == EXISTING_SCOPE_LOCKS
    assert s.run_once().retried == 40
    assert count(db, migrated, "status = 'FAILED'") == 0


@pytest.mark.parametrize("claim", ["joint", "alone"])
def test_a_claim_that_finds_its_cursor_moved_since_its_read_rolls_back(
    make_scheduler: SchedulerFactory,
    migrated: str,
    db: Any,
    monkeypatch: pytest.MonkeyPatch,
    claim: str,
) -> None:
    """The claim moves each cursor where due_cursors read it (its address, kept by the row
    lock). A cursor found elsewhere (here: written again after the read, in the claim's own
    transaction) rolls the whole claim back with a warning: no row inserted, nothing counted,
    and the next claim takes the plan once. The same for a joint claim (of the jobs whose
    claim is the plain one) and a job's own (here: a job with max_running)."""
    # A scheduled row an hour before the current plan: the new cursor resumes after it, due.
    plan = floor_to(db_now(db), timedelta(hours=1))
    insert_row(
        db, migrated, job_name="hourly", plan_time=plan - timedelta(hours=1), status="SUCCESS"
    )
    registry = CollectorRegistry()
    s = make_scheduler(registry=registry)
    recorder = Recorder()

    @s.job(every="1h", max_running=None if claim == "joint" else 5)
    def hourly(run: pgsched.Run) -> None:
        recorder.enter(run)

    owner, statement = ClaimStore, "due_cursors_of_jobs" if claim == "joint" else "due_cursors"
    rewrite = sql.SQL("UPDATE {}.cron_cursors SET updated_at = updated_at")
    read = rewrite_after_read(
        monkeypatch, owner, statement, rewrite.format(sql.Identifier(migrated))
    )
    with capture_logs() as events:
        report = s.run_once()
    assert (report.claimed, report.errors, recorder.runs) == (0, 0, [])
    rolled = [
        (e.get("job") or e["jobs"], e["unmoved"])
        for e in events
        if e["event"] == "claim_rolled_back"
    ]
    assert rolled == [("hourly" if claim == "alone" else ["hourly"], 1)]
    assert [r["plan_time"] for r in rows(db, migrated, "hourly")] == [plan - timedelta(hours=1)]
    won = {"job": "hourly", "outcome": "won"}
    assert registry.get_sample_value("pgsched_claims_total", won) in (None, 0.0)
    monkeypatch.setattr(owner, statement, read)
    report = s.run_once()
    assert (report.claimed, report.succeeded, len(recorder.runs)) == (1, 1, 1)
    assert sorted(r["plan_time"] for r in rows(db, migrated, "hourly")) == [
        plan - timedelta(hours=1),
        plan,
    ]
    assert registry.get_sample_value("pgsched_claims_total", won) == 1.0
