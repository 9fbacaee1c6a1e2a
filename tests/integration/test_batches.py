"""Batch handlers (``batch_size=``): many due runs of a job in one handler call, each run still
its own row, lease, attempt and history."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, TypedDict

import psycopg
import pytest
from psycopg import sql

import pgsched
from pgsched._facades.admin import Admin
from pgsched._storage.store import Store
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.roles import DbRoles
from tests.support.rows import app_table, count, rows, seed_running
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("migrated")


def _scopes(n: int) -> list[pgsched.Scope]:
    return [pgsched.Scope("tenant", f"{i:03}") for i in range(n)]


class _TwoAttempts(TypedDict):
    planner: FixedPlans
    scopes: list[pgsched.Scope]
    max_attempts: int
    retry_backoff: list[str]


def _two_attempts(db: Any, scopes: int) -> _TwoAttempts:
    """A plan a minute old for each of ``scopes`` scopes, each run retried once at once."""
    return {
        "planner": FixedPlans(past_plan(db)),
        "scopes": _scopes(scopes),
        "max_attempts": 2,
        "retry_backoff": [],
    }


def _by_scope(db: Any, schema: str) -> dict[str, dict[str, Any]]:
    return {row["scope_id"]: row for row in rows(db, schema)}


def _tick_until(s: pgsched.Scheduler, db: Any, schema: str, where: str, n: int) -> None:
    def done() -> bool:
        if count(db, schema, where) >= n:
            return True
        s.run_once()
        return False

    wait_until(done, 60, f"{n} rows where {where}", interval=0)


def test_a_batch_handler_gets_its_due_runs_in_batches_each_taking_one_slot(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler(max_concurrency=2)
    calls: list[pgsched.Batch] = []
    lock = threading.Lock()
    running = peak = 0

    @s.job(
        planner=FixedPlans(past_plan(db)), scopes=_scopes(45), batch_size=10, max_plans_per_tick=1
    )
    def fan(batch: pgsched.Batch) -> None:
        nonlocal running, peak
        with lock:
            calls.append(batch)
            running += 1
            peak = max(peak, running)
        time.sleep(0.05)
        with lock:
            running -= 1

    first = s.run_once()
    assert first.claimed <= 20  # two slots of ten runs
    _tick_until(s, db, migrated, "status = 'SUCCESS'", 45)

    assert all(isinstance(b, pgsched.Batch) and 1 <= len(b) <= 10 for b in calls), calls
    assert peak <= 2
    runs = [run for batch in calls for run in batch]
    assert len({run.execution_id for run in runs}) == len(runs) == 45
    assert len({run.fencing_token for run in runs}) == 45
    assert sorted(run.scope.id for run in runs) == [f"{i:03}" for i in range(45)]
    assert all(batch.job == "fan" for batch in calls)
    assert all(row["attempt"] == 1 for row in rows(db, migrated))


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_marks_stand_and_the_unmarked_runs_follow_the_handler(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str, kind: str
) -> None:
    s = make_scheduler()
    attempts: list[list[tuple[str, int]]] = []

    def decide(batch: pgsched.Batch) -> None:
        attempts.append([(run.scope.id, run.attempt) for run in batch])
        for run in batch:
            if run.attempt == 1 and run.scope.id == "000":
                run.fail("bad input for 000")
            elif run.attempt == 1 and run.scope.id == "001":
                run.succeed(pgsched.Result(rows_affected=7, data={"scope": "001"}))
            elif run.attempt == 1 and run.scope.id == "002":
                run.fail(ValueError("no such tenant"))
            elif run.attempt == 2 and run.scope.id == "000":
                run.succeed(3)
        if batch[0].attempt == 2:
            raise RuntimeError("the batch broke")

    if kind == "sync":

        def handler(batch: pgsched.Batch) -> None:
            decide(batch)
    else:

        async def handler(batch: pgsched.Batch) -> None:  # type: ignore[misc]
            decide(batch)

    s.register(handler, name="marks", batch_size=50, **_two_attempts(db, 5))
    report = s.run_once()
    assert (report.succeeded, report.failed) == (3, 2)
    found = _by_scope(db, migrated)
    assert found["000"]["status"] == "FAILED" and found["000"]["error_msg"] == "bad input for 000"
    assert (found["001"]["status"], found["001"]["rows_affected"]) == ("SUCCESS", 7)
    assert found["001"]["result"] == {"scope": "001"}
    assert found["002"]["status"] == "FAILED"
    assert found["002"]["error_msg"] == "ValueError: no such tenant"
    assert {found[i]["status"] for i in ("003", "004")} == {"SUCCESS"}

    _tick_until(s, db, migrated, "attempt = 2 AND status <> 'RUNNING'", 2)
    assert attempts[0] == [(f"{i:03}", 1) for i in range(5)]
    assert sorted(attempts[1]) == [("000", 2), ("002", 2)]  # the failed runs, retried together
    found = _by_scope(db, migrated)
    assert (found["000"]["status"], found["000"]["rows_affected"]) == ("SUCCESS", 3)
    assert found["002"]["status"] == "FAILED"
    assert found["002"]["error_msg"] == "RuntimeError: the batch broke"
    history = Admin(dsn=runtime_dsn, schema=migrated).run(found["002"]["id"])
    assert [a.error_msg for a in history.attempts] == [
        "ValueError: no such tenant",
        "RuntimeError: the batch broke",
    ]
    last = history.attempts[-1].traceback
    assert last is not None and last.rstrip().endswith("RuntimeError: the batch broke")


def test_a_batch_handler_that_returns_a_value_fails_its_unmarked_runs(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()

    @s.job(planner=FixedPlans(past_plan(db)), scopes=_scopes(3), batch_size=3, max_attempts=1)
    def counts(batch: pgsched.Batch) -> int:
        batch[0].succeed()
        return len(batch)

    s.run_once()
    found = _by_scope(db, migrated)
    assert found["000"]["status"] == "SUCCESS"
    for scope in ("001", "002"):
        assert (found[scope]["status"], found[scope]["error_code"]) == ("FAILED", "invalid_result")
        assert "batch handler returned int" in found[scope]["error_msg"]


def test_a_batch_past_its_run_timeout_fails_its_unmarked_runs(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()

    @s.job(
        planner=FixedPlans(past_plan(db)),
        scopes=_scopes(3),
        batch_size=3,
        max_attempts=1,
        run_timeout="1s",
    )
    async def slow(batch: pgsched.Batch) -> None:
        batch[1].succeed()
        await asyncio.sleep(30)

    s.run_once()
    found = _by_scope(db, migrated)
    assert found["001"]["status"] == "SUCCESS"
    assert {found[i]["error_code"] for i in ("000", "002")} == {"run_timeout"}


@pytest.fixture
def effects(db: Any, migrated: str, db_roles: DbRoles) -> sql.Composable:
    return app_table(db, migrated, db_roles.owner, "effects", "scope text, attempt int")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_transactional_batch_commits_its_writes_with_all_its_rows_or_none(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, effects: sql.Composable, kind: str
) -> None:
    s = make_scheduler()
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(effects)

    def params(batch: pgsched.Batch) -> list[tuple[str, int]]:
        keep = [run for run in batch if run.scope.id != "000" or run.attempt > 1]
        for run in batch:
            if run not in keep:
                run.fail("000 waits for its second attempt")
        return [(run.scope.id, run.attempt) for run in keep]

    def check(batch: pgsched.Batch) -> None:
        assert all(run.conn is batch.conn for run in batch)
        if batch[0].attempt == 2:
            raise RuntimeError("rolled back with its rows")

    if kind == "sync":

        def handler(batch: pgsched.Batch) -> None:
            assert isinstance(batch.conn, psycopg.Connection)
            with batch.conn.cursor() as cur:
                cur.executemany(insert, params(batch))
            check(batch)
    else:

        async def handler(batch: pgsched.Batch) -> None:  # type: ignore[misc]
            assert isinstance(batch.conn, psycopg.AsyncConnection)
            async with batch.conn.cursor() as cur:
                await cur.executemany(insert, params(batch))
            check(batch)

    s.register(handler, name="tx", batch_size=10, transactional=True, **_two_attempts(db, 4))
    report = s.run_once()
    assert (report.succeeded, report.failed) == (3, 1)
    written = db.execute(sql.SQL("SELECT scope, attempt FROM {} ORDER BY 1").format(effects))
    assert written.fetchall() == [("001", 1), ("002", 1), ("003", 1)]
    found = _by_scope(db, migrated)
    assert found["000"]["error_msg"] == "000 waits for its second attempt"

    _tick_until(s, db, migrated, "attempt = 2 AND status <> 'RUNNING'", 1)
    written = db.execute(sql.SQL("SELECT count(*) FROM {}").format(effects))
    assert written.fetchone() == (3,)  # the second attempt's write rolled back
    found = _by_scope(db, migrated)
    assert found["000"]["status"] == "FAILED"
    assert found["000"]["error_msg"] == "RuntimeError: rolled back with its rows"


def test_a_dynamic_batch_job_takes_its_schedules_in_batches(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()
    sizes: list[int] = []

    @s.job(dynamic=True, batch_size=5)
    def tenants(batch: pgsched.Batch) -> None:
        sizes.append(len(batch))

    s.put_schedules("tenants", [pgsched.ScheduleSpec(scope, every="1s") for scope in _scopes(12)])
    _tick_until(s, db, migrated, "status = 'SUCCESS'", 12)
    assert sizes and max(sizes) <= 5


def test_stolen_runs_of_a_crashed_replica_are_retried_in_a_batch(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    for scope in _scopes(4):
        seed_running(db, migrated, "fan", plan, stale_in=-timedelta(seconds=1), scope=scope)
    s = make_scheduler()
    seen: list[list[tuple[str, int]]] = []

    @s.job(planner=FixedPlans(plan), scopes=_scopes(4), batch_size=10, allow_stale_reentry=True)
    def fan(batch: pgsched.Batch) -> None:
        seen.append([(run.scope.id, run.attempt) for run in batch])

    report = s.run_once()
    assert report.stolen == 4
    assert len(seen) == 1  # one batch
    assert sorted(scope for scope, _ in seen[0]) == [f"{i:03}" for i in range(4)]
    assert {row["status"] for row in rows(db, migrated)} == {"SUCCESS"}


@contextmanager
def _heartbeats(monkeypatch: Any) -> Iterator[list[int]]:
    """The number of leases each heartbeat statement renewed."""
    sizes: list[int] = []
    original = Store.heartbeat

    async def counted(self: Store, conn: Any, leases: list[Any]) -> Any:
        sizes.append(len(leases))
        return await original(self, conn, leases)

    monkeypatch.setattr(Store, "heartbeat", counted)
    yield sizes


def test_a_batch_is_renewed_in_one_statement(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, monkeypatch: Any
) -> None:
    s = make_scheduler()
    with _heartbeats(monkeypatch) as sizes:

        @s.job(
            planner=FixedPlans(past_plan(db)),
            scopes=_scopes(8),
            batch_size=8,
            heartbeat_interval="1s",
            run_timeout="9s",
            stale_timeout="10s",
        )
        def slow(batch: pgsched.Batch) -> None:
            deadline = time.monotonic() + 10
            while len(sizes) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)

        report = s.run_once()
    assert report.succeeded == 8
    assert len(sizes) >= 2 and set(sizes) == {8}, sizes
