"""The engine (handlers, timeouts, shutdown): outcomes, scope data, run(), restarts."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, timedelta
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.options import LeaseTimes
from tests.support.plans import FixedPlans, past_plan
from tests.support.postgres import PrivateServer
from tests.support.rows import count, db_now, row_by_id, rows
from tests.support.threads import Recorder, running, wait_for_fresh_tick
from tests.support.waiting import wait_until

QUICK_TIMEOUT = LeaseTimes(run_timeout="1s", stale_timeout="10s", heartbeat_interval="2s")


def by_scope(db: Any, schema: str) -> dict[str, dict[str, Any]]:
    return {r["scope_id"]: r for r in rows(db, schema)}


def test_async_handler_past_run_timeout_is_cancelled(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    cancelled = threading.Event()
    s = make_scheduler()

    @s.job(every="1d", **QUICK_TIMEOUT)
    async def sleepy(run: pgsched.Run) -> int:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    started = time.monotonic()
    report = s.run_once()
    # guard against an order-of-magnitude regression (typically ~1 s: the run_timeout), not a
    # performance claim: those live in bench/
    assert time.monotonic() - started < 10
    assert report.failed == 1
    assert cancelled.is_set(), "the async handler was not cancelled"
    (row,) = rows(db, migrated)
    assert (row["status"], row["error_code"]) == ("FAILED", "run_timeout")
    assert "TimeoutError" in row["error_msg"]
    assert row["rows_affected"] is None


def test_sync_handler_past_run_timeout_fails_and_its_late_result_is_discarded(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    release, returned = threading.Event(), threading.Event()
    s = make_scheduler()

    @s.job(every="1d", **QUICK_TIMEOUT)
    def stuck(run: pgsched.Run) -> pgsched.Result:
        release.wait(20)
        returned.set()
        return pgsched.Result(rows_affected=5, data={"late": True})

    try:
        started = time.monotonic()
        report = s.run_once()
        # guard against an order-of-magnitude regression (typically ~1 s: the run_timeout), not
        # a performance claim: those live in bench/
        assert time.monotonic() - started < 10
        assert report.failed == 1
        (row,) = rows(db, migrated)
        assert (row["status"], row["error_code"]) == ("FAILED", "run_timeout")
    finally:
        release.set()
    assert returned.wait(10)
    (after,) = rows(db, migrated)
    assert after == row, "the late result must not be written"
    assert after["result"] == {}


def test_late_sync_result_is_discarded_while_the_replica_keeps_running(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    release, returned = threading.Event(), threading.Event()
    s = make_scheduler(tick_interval=0.2)

    @s.job(every="1d", **QUICK_TIMEOUT)
    def stuck_live(run: pgsched.Run) -> int:
        release.wait(20)
        returned.set()
        return 5

    try:
        with running(s):
            wait_until(
                lambda: count(db, migrated, "status = 'FAILED' AND error_code = 'run_timeout'"),
                10,
                "the run_timeout failure",
            )
            (row,) = rows(db, migrated)
            release.set()
            assert returned.wait(10)
            wait_for_fresh_tick(s)
            (after,) = rows(db, migrated)
            assert after == row, "the late result must not be written"
    finally:
        release.set()


def test_register_and_unregister_on_a_running_scheduler(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler(tick_interval=0.2)
    s.register(recorder.enter, name="first", every="1d")
    with running(s):
        wait_until(lambda: count(db, migrated, "job_name = 'first'"), 10, "first to run")
        s.register(recorder.enter, name="late_comer", every="1d")
        wait_until(
            lambda: count(db, migrated, "job_name = 'late_comer' AND status = 'SUCCESS'"),
            10,
            "a job registered while running to be planned",
        )
        s.unregister("late_comer")
        with pytest.raises(pgsched.NotFoundError):
            s.trigger("late_comer")
    assert sorted(r.job for r in recorder.runs) == ["first", "late_comer"]


BEHAVIOURS: dict[str, Any] = {
    "raise": lambda: (_ for _ in ()).throw(KeyError("kaboom 42")),
    "long_error": lambda: (_ for _ in ()).throw(ValueError("x" * 10_000)),
    "nan": lambda: pgsched.Result(data={"v": float("nan")}),
    "str": lambda: "not a result",
    "huge": lambda: pgsched.Result(data={"blob": "y" * (17 * 1024)}),
    "unserialisable": lambda: pgsched.Result(data={"o": object()}),
    "over_16k": lambda: pgsched.Result(data="y" * (16 * 1024 - 1)),  # 16385 bytes encoded
    "bigint": lambda: 2**63,
    "nul_data": lambda: pgsched.Result(data={"s": "a\x00b"}),
    "nul_error": lambda: (_ for _ in ()).throw(RuntimeError("a\x00b")),
    "exact_16k": lambda: pgsched.Result(data="y" * (16 * 1024 - 2)),  # 16384 bytes encoded
    "result": lambda: pgsched.Result(rows_affected=7, data={"a": [1, 2], "s": "é", "n": None}),
    "int": lambda: 5,
    "none": lambda: None,
}


@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_handler_outcomes_are_stored(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, is_async: bool
) -> None:
    s = make_scheduler(max_concurrency=len(BEHAVIOURS))
    scopes = [pgsched.Scope("case", name) for name in BEHAVIOURS]
    outcomes: Callable[[pgsched.Run], Any]

    if is_async:

        async def outcomes(run: pgsched.Run) -> Any:
            return BEHAVIOURS[run.scope.id]()

    else:

        def outcomes(run: pgsched.Run) -> Any:
            return BEHAVIOURS[run.scope.id]()

    s.register(outcomes, every="1d", scopes=scopes)
    report = s.run_once()
    assert report.claimed == len(BEHAVIOURS)
    assert (report.succeeded, report.failed) == (4, 10)
    got = by_scope(db, migrated)

    assert got["raise"]["error_code"] == "handler_error"
    assert "KeyError" in got["raise"]["error_msg"] and "kaboom 42" in got["raise"]["error_msg"]
    assert got["long_error"]["error_code"] == "handler_error"
    assert got["long_error"]["error_msg"].startswith("ValueError")
    assert len(got["long_error"]["error_msg"]) <= 4000
    assert got["nul_error"]["error_code"] == "handler_error"
    assert "RuntimeError" in got["nul_error"]["error_msg"]
    invalid = ("nan", "str", "huge", "unserialisable", "over_16k", "bigint", "nul_data")
    for case in invalid:
        assert (got[case]["status"], got[case]["error_code"]) == ("FAILED", "invalid_result"), case
        assert got[case]["result"] == {}
    for case in ("raise", "long_error", "nul_error", *invalid):
        assert got[case]["status"] == "FAILED"
        assert got[case]["next_retry_at"] is None  # max_attempts defaults to 1

    assert got["exact_16k"]["status"] == "SUCCESS", "16 KiB encoded is allowed"
    assert got["exact_16k"]["result"] == "y" * (16 * 1024 - 2)
    assert got["result"]["status"] == "SUCCESS"
    assert got["result"]["result"] == {"a": [1, 2], "s": "é", "n": None}
    assert got["result"]["rows_affected"] == 7
    assert (got["int"]["status"], got["int"]["rows_affected"], got["int"]["result"]) == (
        "SUCCESS",
        5,
        {},
    )
    assert (got["none"]["status"], got["none"]["rows_affected"], got["none"]["result"]) == (
        "SUCCESS",
        None,
        {},
    )
    for row in got.values():
        assert row["error_code"] is None or row["status"] == "FAILED"
        assert row["started_at"] <= row["finished_at"]
        assert row["duration_ms"] is not None and row["duration_ms"] >= 0


def test_run_fields_match_the_row(make_scheduler: SchedulerFactory, migrated: str, db: Any) -> None:
    recorder = Recorder()
    s = make_scheduler("fields-runner")

    @s.job(every="1d", max_attempts=2, scopes=[pgsched.Scope("tenant", "42")])
    def fields(run: pgsched.Run) -> None:
        run.log.info("inside")  # a usable structlog logger
        run.heartbeat()  # holds its lease: must not raise
        assert run.lease_lost is False
        recorder.enter(run)

    s.run_once()
    (run,) = recorder.runs
    (row,) = rows(db, migrated)
    assert row["status"] == "SUCCESS", row
    assert run.job == "fields"
    assert run.scope == pgsched.Scope("tenant", "42")
    assert run.plan_time.tzinfo is not None and run.plan_time.utcoffset() == timedelta(0)
    assert run.plan_time == row["plan_time"]
    assert (run.attempt, run.max_attempts) == (1, 2)
    assert run.execution_id == row["id"]
    assert run.lease_token == row["lease_token"]
    assert run.fencing_token == row["fencing_token"]
    assert run.runner_id == row["runner_id"] == "fields-runner"
    assert run.trigger == "schedule" == row["trigger"]


ODD_IDS = [
    'it\'s "quoted"',
    "100% _literal_ \\ %s %(x)s",
    "ünïcødé ✓ 日本語 🎉",
    "a/b\\c/../d",
    "  spaced  out  ",
    "semi;colon -- DROP TABLE x;",
    "line\u2028break\u00a0nbsp",  # (control characters such as a newline are refused)
    "x" * 1_024,  # the longest id allowed (MAX_SCOPE_BYTES)
]


def test_scope_ids_are_data(make_scheduler: SchedulerFactory, migrated: str, db: Any) -> None:
    plan = past_plan(db)
    recorder = Recorder()
    scopes = [pgsched.Scope("k'ind %", sid) for sid in ODD_IDS]
    s = make_scheduler(max_concurrency=len(scopes))
    s.register(recorder.enter, name="odd", planner=FixedPlans(plan), scopes=scopes)
    report = s.run_once()
    assert report.claimed == len(scopes)
    assert sorted(r.scope.id for r in recorder.runs) == sorted(ODD_IDS)
    assert all(r.scope.kind == "k'ind %" for r in recorder.runs)
    stored = rows(db, migrated)
    assert sorted(r["scope_id"] for r in stored) == sorted(ODD_IDS)
    assert {r["scope_kind"] for r in stored} == {"k'ind %"}
    assert {r["status"] for r in stored} == {"SUCCESS"}
    assert s.run_once().started == 0, "each plan once, even for odd ids"

    # a manual trigger with an odd scope
    ident = s.trigger("odd", scope=pgsched.Scope("k'ind %", ODD_IDS[2])).id
    assert ident is not None
    s.run_once()
    assert recorder.runs[-1].scope.id == ODD_IDS[2]
    assert row_by_id(db, migrated, ident)["scope_id"] == ODD_IDS[2]


def test_longest_incompressible_scope_id_is_data(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # 1024 bytes of random CJK text: the longest id allowed, and pglz cannot squeeze it.
    long_id = "".join(chr(0x4E00 + b) for b in os.urandom(341))
    assert len(long_id.encode()) == 1_023
    recorder = Recorder()
    s = make_scheduler()
    s.register(recorder.enter, name="long", every="1d", scopes=[pgsched.Scope("k", long_id)])
    s.run_once()
    assert [r.scope.id for r in recorder.runs] == [long_id]
    assert [r["scope_id"] for r in rows(db, migrated)] == [long_id]


def test_too_long_scope_id_is_refused_with_its_size() -> None:
    # A 10 KB id would not fit the btree unique key; it is refused where it is made.
    with pytest.raises(pgsched.ConfigError, match="10240 bytes; the limit is 1024"):
        pgsched.Scope("k", "x" * 10_240)


def test_run_ticks_every_plan_once_and_stops(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    recorder = Recorder()
    s = make_scheduler(tick_interval=0.2)
    s.register(recorder.enter, name="every_second", every="1s")
    with running(s) as thread:
        wait_until(lambda: count(db, migrated, "status = 'SUCCESS'") >= 3, 10, "3 plans")
        assert thread.is_alive()
    plans = [r["plan_time"] for r in rows(db, migrated)]
    assert len(plans) == len(set(plans))
    assert all(p.microsecond == 0 for p in plans)
    assert sorted(r.plan_time for r in recorder.runs) == sorted(plans)


def test_shutdown_fails_an_abandoned_run_as_retryable(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    started, release = threading.Event(), threading.Event()
    s = make_scheduler(shutdown_grace=0.5, tick_interval=0.2)

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
    assert (row["status"], row["error_code"]) == ("FAILED", "shutdown")
    assert row["next_retry_at"] is not None, "an abandoned run is retryable"


def test_shutdown_lets_a_handler_finish_within_the_grace(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    started, release = threading.Event(), threading.Event()
    # The 10 s grace bounds the handler, released ~0.3 s into the shutdown: a guard against an
    # order-of-magnitude regression, not a performance claim (those live in bench/).
    s = make_scheduler(shutdown_grace=10, tick_interval=0.2)

    @s.job(every="1d", max_attempts=2, run_timeout="30s")
    def finishing(run: pgsched.Run) -> int:
        started.set()
        release.wait(20)
        return 3

    stopper = threading.Timer(0.3, release.set)  # finishes while run() is shutting down
    try:
        with running(s):
            assert started.wait(10)
            stopper.start()
    finally:
        release.set()
        stopper.cancel()
    (row,) = rows(db, migrated)
    assert (row["status"], row["rows_affected"]) == ("SUCCESS", 3)


# -- resilience: a PostgreSQL restart under a running scheduler ------------------------------


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    with PrivateServer.create() as server:
        yield server


@pytest.mark.parametrize("how", ["restart", "outage"])
def test_scheduler_survives_a_postgres_restart(private_server: PrivateServer, how: str) -> None:
    dsn = private_server.unix_dsn()
    s = pgsched.Scheduler(dsn=dsn, schema="restart", runner_id="survivor", tick_interval=0.2)
    s.register(lambda run: time.sleep(0.3), name="heartbeat_job", every="1s")
    s.migrate()

    def successes_after(t: Any) -> int:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                found = conn.execute(
                    "SELECT count(*) FROM restart.cron_executions "
                    "WHERE status = 'SUCCESS' AND plan_time > %s",
                    (t,),
                ).fetchone()
                return int(found[0]) if found else 0
        except psycopg.OperationalError:
            return 0

    def tick_errors() -> int:
        runtime = s._runtime
        return runtime.report.errors if runtime is not None else 0

    epoch = db_now_of(dsn) - timedelta(days=1)
    with running(s, stop_timeout=60) as thread:
        wait_until(lambda: successes_after(epoch) >= 2, 15, "plans before the restart")
        if how == "restart":
            private_server.restart("fast")
        else:
            # down long enough for the scheduler to fail ticks, then back on the same socket
            private_server.stop("fast")
            wait_until(lambda: tick_errors() >= 1, 15, "a tick to fail while the DB is down")
            private_server.start()
        restarted_at = db_now_of(dsn)
        wait_until(lambda: successes_after(restarted_at) >= 3, 30, "plans after the restart")
        assert thread.is_alive(), "the scheduler died with the database"

    with psycopg.connect(dsn, autocommit=True) as conn:
        plans = [p for (p,) in conn.execute("SELECT plan_time FROM restart.cron_executions")]
        stuck = conn.execute(
            "SELECT count(*) FROM restart.cron_executions WHERE status NOT IN ('SUCCESS', 'FAILED')"
        ).fetchone()
    assert len(plans) == len(set(plans))
    assert stuck == (0,)


def db_now_of(dsn: str) -> Any:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return db_now(conn).astimezone(UTC)


def _run_once_within(s: pgsched.Scheduler, timeout: float) -> list[pgsched.TickReport]:
    """``s.run_once()`` in a daemon thread; returns [] if it has not finished in ``timeout``."""
    out: list[pgsched.TickReport] = []
    worker = threading.Thread(target=lambda: out.append(s.run_once()), daemon=True)
    worker.start()
    worker.join(timeout)
    return out


def test_lone_surrogate_result_is_invalid_result(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(lambda run: pgsched.Result(data={"s": "\ud800"}), name="surrogate", every="1d")
    # 4 s: a hang detector, a guard against an order-of-magnitude regression (the tick normally
    # takes well under a second), not a performance claim: those live in bench/
    reports = _run_once_within(s, 4)
    (row,) = rows(db, migrated)
    assert (row["status"], row["error_code"]) == ("FAILED", "invalid_result")
    assert reports and reports[0].failed == 1


def test_exception_message_with_lone_surrogate_does_not_block_outcomes(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    def undecodable(run: pgsched.Run) -> int:
        if run.scope.id == "fine":
            time.sleep(0.3)  # finishes after the poisonous outcome was queued
            return 1
        # os.fsdecode of non-UTF-8 bytes gives lone surrogates, e.g. a file name read from disk
        name = os.fsdecode(b"report-\xff.csv")
        raise FileNotFoundError(f"cannot open {name}")

    s = make_scheduler()
    s.register(
        undecodable, every="1d", scopes=[pgsched.Scope("k", "bad"), pgsched.Scope("k", "fine")]
    )
    # 4 s: a hang detector, a guard against an order-of-magnitude regression (the tick normally
    # takes well under a second, 0.3 s of it the sleep), not a performance claim: see bench/
    reports = _run_once_within(s, 4)
    got = by_scope(db, migrated)
    assert got["fine"]["status"] == "SUCCESS", "a later outcome must not be blocked"
    assert (got["bad"]["status"], got["bad"]["error_code"]) == ("FAILED", "handler_error")
    assert "FileNotFoundError" in got["bad"]["error_msg"]
    assert reports and reports[0].failed == 1


def test_a_tick_error_names_the_statement_that_failed(
    make_scheduler: SchedulerFactory, migrated: str, pg_dsn: str
) -> None:
    # "canceling statement due to statement timeout" alone does not say which of a tick's
    # statements ran long; the log line does.
    s = make_scheduler(statement_timeout="1s")
    s.register(lambda run: None, name="held_up", every="1s")
    locked = psycopg.sql.SQL("LOCK TABLE {}.job_state IN ACCESS EXCLUSIVE MODE").format(
        psycopg.sql.Identifier(migrated)
    )
    with psycopg.connect(pg_dsn) as holder, capture_logs() as events:
        holder.execute(locked)
        with pytest.raises(pgsched.PgschedError):
            s.run_once()
    errors = [e["error"] for e in events if e["event"] == "tick_error"]
    assert errors, events
    assert "statement timeout (statement tick_probe)" in errors[0], errors
