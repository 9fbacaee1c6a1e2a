"""Transactional runs whose transaction the database failed (its connection killed, a server
that turned read-only, a COMMIT cut off): the plan is not spent (max_attempts=1 loses nothing)
and the effect commits exactly once with the SUCCESS row."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql
from structlog.testing import capture_logs

import pgsched
from pgsched._engine.transaction import Transactions, TransactionUnavailable, Written
from pgsched._records import Finish
from pgsched._storage.store import Store
from tests.integration.conftest import SchedulerFactory
from tests.support.roles import DbRoles
from tests.support.rows import app_table, rows
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("migrated")


@pytest.fixture
def ledger(db: Any, migrated: str, db_roles: DbRoles) -> sql.Composable:
    return app_table(db, migrated, db_roles.owner, "ledger", "plan text, attempt int")


def _ledger(db: psycopg.Connection[Any], name: sql.Composable) -> list[tuple[Any, ...]]:
    return db.execute(sql.SQL("SELECT plan, attempt FROM {}").format(name)).fetchall()


def _in_thread(fn: Any) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    thread.start()
    return thread, out


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_killed_connection_runs_the_plan_again_without_spending_it(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, ledger: sql.Composable, kind: str
) -> None:
    s = make_scheduler()
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(ledger)
    pids: list[int] = []
    killed = threading.Event()

    if kind == "sync":

        def handler(run: pgsched.Run) -> int:
            assert isinstance(run.conn, psycopg.Connection)
            run.conn.execute(insert, ("p", run.attempt))
            if not pids:
                row = run.conn.execute("SELECT pg_backend_pid()").fetchone()
                assert row is not None
                pids.append(row[0])
                assert killed.wait(10)
                run.conn.execute("SELECT 1")  # the server ended this session: raises
            return 1

    else:

        async def handler(run: pgsched.Run) -> int:  # type: ignore[misc]
            assert isinstance(run.conn, psycopg.AsyncConnection)
            await run.conn.execute(insert, ("p", run.attempt))
            if not pids:
                cur = await run.conn.execute("SELECT pg_backend_pid()")
                row = await cur.fetchone()
                assert row is not None
                pids.append(row[0])
                while not killed.is_set():
                    await asyncio.sleep(0.02)
                await run.conn.execute("SELECT 1")
            return 1

    s.register(handler, name="tx", every="1h", transactional=True, max_attempts=1)
    with capture_logs() as logs:
        thread, out = _in_thread(s.run_once)
        wait_until(lambda: pids, 10, "the handler's first run")
        db.execute("SELECT pg_terminate_backend(%s)", (pids[0],))
        killed.set()
        thread.join(20)
    assert not thread.is_alive()
    assert (out[0].succeeded, out[0].failed) == (1, 0)
    (row,) = rows(db, migrated)
    assert (row["status"], row["attempt"], row["error_code"]) == ("SUCCESS", 1, None)
    assert _ledger(db, ledger) == [("p", 1)]  # the killed run's insert vanished with it
    events = [e["event"] for e in logs]
    assert events.count("transactional_unavailable") == 1
    assert events.count("transactional_rerun") == 1


def test_a_commit_that_landed_but_was_cut_off_is_not_run_again(
    make_scheduler: SchedulerFactory,
    migrated: str,
    db: Any,
    ledger: sql.Composable,
    monkeypatch: Any,
) -> None:
    """The connection is lost during COMMIT after the server committed: the replica cannot
    tell, reads the row, finds it SUCCESS under its own lease and records that."""
    original = Transactions.run_async

    async def cut_off(self: Transactions, *args: Any) -> list[Written] | None:
        written = await original(self, *args)
        assert written is not None
        lost = psycopg.OperationalError("server closed the connection unexpectedly")
        raise TransactionUnavailable(lost, [outcome for outcome, _ in written])

    monkeypatch.setattr(Transactions, "run_async", cut_off)
    s = make_scheduler()
    insert = sql.SQL("INSERT INTO {} VALUES ('p', 1)").format(ledger)
    calls: list[int] = []

    async def handler(run: pgsched.Run) -> int:
        assert isinstance(run.conn, psycopg.AsyncConnection)
        calls.append(run.attempt)
        await run.conn.execute(insert)
        return 1

    s.register(handler, name="tx", every="1h", transactional=True, max_attempts=1)
    with capture_logs() as logs:
        report = s.run_once()
    assert (report.succeeded, report.failed, report.leases_lost) == (1, 0, 0)
    assert calls == [1]
    (row,) = rows(db, migrated)
    assert (row["status"], row["attempt"]) == ("SUCCESS", 1)
    assert _ledger(db, ledger) == [("p", 1)]
    (warned,) = [e for e in logs if e["event"] == "transactional_unavailable"]
    assert warned["commit_unknown"] is True
    assert "transactional_rerun" not in [e["event"] for e in logs]


@pytest.fixture
def private_db(pg_dsn: str) -> Iterator[str]:
    """A database of the test's own (``ALTER DATABASE`` must not touch the shared one)."""
    name = f"ro_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield name
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


def test_a_database_turned_read_only_leaves_the_plan_running_until_it_takes_writes(
    pg_dsn: str, db: Any, private_db: str
) -> None:
    """Sessions opened after ``ALTER DATABASE ... SET default_transaction_read_only`` are
    read-only (like a switched-over primary's): the replica's pool, opened before, still
    claims, but the run's own connection finds its server read-only, so the handler is not
    called (nor the plan spent) until the database is reset."""
    dsn = psycopg.conninfo.make_conninfo(pg_dsn, dbname=private_db)
    ident = sql.Identifier(private_db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE ledger (plan text, attempt int)")
    s = pgsched.Scheduler(dsn=dsn, runner_id="ro", tick_interval="0.2s", shutdown_grace="1s")
    s.migrate()
    calls: list[int] = []

    async def handler(run: pgsched.Run) -> int:
        assert isinstance(run.conn, psycopg.AsyncConnection)
        calls.append(run.attempt)
        await run.conn.execute("INSERT INTO ledger VALUES ('p', %s)", (run.attempt,))
        return 1

    s.register(handler, name="tx", every="1h", transactional=True, max_attempts=1)
    s.pause("tx")  # claimed only once the database has turned read-only
    thread = threading.Thread(target=s.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: s._runtime and s._runtime.last_tick_ok, 10, "a first tick")
        read_only = sql.SQL("ALTER DATABASE {} SET default_transaction_read_only = on")
        db.execute(read_only.format(ident))
        asyncio.run(_resume(dsn, "tx"))
        wait_until(lambda: _statuses(dsn) == [("RUNNING", 1)], 15, "the claim")
        runtime = s._runtime
        assert runtime is not None
        claimed_tick = runtime.last_tick_ok
        wait_until(
            lambda: runtime.last_tick_ok != claimed_tick and _statuses(dsn) == [("RUNNING", 1)],
            15,
            "a tick after the claim, the run still waiting for a writable server",
        )
        assert calls == []  # never called on a read-only server
        assert _statuses(dsn) == [("RUNNING", 1)]  # not FAILED: the plan is kept
        db.execute(sql.SQL("ALTER DATABASE {} RESET default_transaction_read_only").format(ident))
        wait_until(lambda: _statuses(dsn) == [("SUCCESS", 1)], 20, "the run to succeed")
    finally:
        s.stop()
        thread.join(15)
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT plan, attempt FROM ledger").fetchall() == [("p", 1)]


def _statuses(dsn: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT status, attempt FROM pgsched.cron_executions").fetchall()


async def _resume(dsn: str, job: str) -> None:
    """``resume`` through a session pinned read-write (a new one would be read-only now)."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("SET default_transaction_read_only = off")
        await Store("pgsched").set_paused(conn, job, False)


def test_a_second_success_under_the_same_lease_writes_nothing(
    make_scheduler: SchedulerFactory,
    migrated: str,
    db: Any,
    ledger: sql.Composable,
    runtime_dsn: str,
) -> None:
    """The guard a rerun would meet if its COMMIT had landed unseen: the SUCCESS write matches
    only a RUNNING row, so a second transaction of the same lease rolls its effect back."""
    s = make_scheduler()
    insert = sql.SQL("INSERT INTO {} VALUES ('p', 1)").format(ledger)

    async def handler(run: pgsched.Run) -> int:
        assert isinstance(run.conn, psycopg.AsyncConnection)
        await run.conn.execute(insert)
        return 1

    s.register(handler, name="tx", every="1h", transactional=True, max_attempts=1)
    assert s.run_once().succeeded == 1
    (row,) = rows(db, migrated)

    async def again() -> dict[Any, Any]:
        async with await psycopg.AsyncConnection.connect(runtime_dsn) as conn:
            await conn.execute(insert)
            fin = Finish(
                row["id"],
                row["lease_token"],
                row["plan_time"],
                "SUCCESS",
                None,
                None,
                1,
                None,
                1,
                None,
            )
            written = await Store(migrated).finish(conn, [fin])
            await (conn.commit() if written else conn.rollback())
            return written

    assert asyncio.run(again()) == {}
    assert _ledger(db, ledger) == [("p", 1)]
    assert rows(db, migrated)[0]["finished_at"] == row["finished_at"]
