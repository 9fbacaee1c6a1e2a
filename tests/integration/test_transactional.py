"""transactional=True: the handler's writes through run.conn commit iff the lease holds."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.options import LeaseTimes
from tests.support.roles import DbRoles
from tests.support.rows import app_table, make_stale, row_by_id, rows
from tests.support.threads import running
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("migrated")


@pytest.fixture
def ledger(db: Any, migrated: str, db_roles: DbRoles) -> sql.Composable:
    return app_table(db, migrated, db_roles.owner, "ledger", "plan text, attempt int, runner text")


def ledger_rows(db: psycopg.Connection[Any], name: sql.Composable) -> list[tuple[Any, ...]]:
    return db.execute(
        sql.SQL("SELECT plan, attempt, runner FROM {} ORDER BY 2").format(name)
    ).fetchall()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_success_commits_writes_with_the_success_row(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, ledger: sql.Composable, kind: str
) -> None:
    s = make_scheduler()
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(ledger)

    if kind == "sync":

        def handler(run: pgsched.Run) -> int:
            assert isinstance(run.conn, psycopg.Connection)
            run.conn.execute(insert, (run.plan_time.isoformat(), run.attempt, run.runner_id))
            return 1

    else:

        async def handler(run: pgsched.Run) -> int:  # type: ignore[misc]
            assert isinstance(run.conn, psycopg.AsyncConnection)
            await run.conn.execute(insert, (run.plan_time.isoformat(), run.attempt, run.runner_id))
            return 1

    s.register(handler, name="tx", every="1h", transactional=True)
    report = s.run_once()
    assert (report.succeeded, report.failed) == (1, 0)
    (row,) = rows(db, migrated)
    assert row["status"] == "SUCCESS" and row["rows_affected"] == 1
    assert ledger_rows(db, ledger) == [(row["plan_time"].isoformat(), 1, s.runner_id)]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_failure_and_invalid_result_roll_the_writes_back(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, ledger: sql.Composable, kind: str
) -> None:
    s = make_scheduler()
    insert = sql.SQL("INSERT INTO {} VALUES ('x', 1, 'r')").format(ledger)

    if kind == "sync":

        def boom(run: pgsched.Run) -> None:
            assert isinstance(run.conn, psycopg.Connection)
            run.conn.execute(insert)
            raise RuntimeError("after writing")

        def bad(run: pgsched.Run) -> object:
            assert isinstance(run.conn, psycopg.Connection)
            run.conn.execute(insert)
            return "not a result"

    else:

        async def boom(run: pgsched.Run) -> None:  # type: ignore[misc]
            assert isinstance(run.conn, psycopg.AsyncConnection)
            await run.conn.execute(insert)
            raise RuntimeError("after writing")

        async def bad(run: pgsched.Run) -> object:  # type: ignore[misc]
            assert isinstance(run.conn, psycopg.AsyncConnection)
            await run.conn.execute(insert)
            return "not a result"

    s.register(boom, name="boom", every="1h", transactional=True)
    s.register(bad, name="bad", every="1h", transactional=True)
    report = s.run_once()
    assert report.failed == 2
    codes = {r["job_name"]: r["error_code"] for r in rows(db, migrated)}
    assert codes == {"boom": "handler_error", "bad": "invalid_result"}
    assert ledger_rows(db, ledger) == []


def test_stolen_lease_rolls_back_the_old_holders_writes(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, ledger: sql.Composable
) -> None:
    """A holder that keeps running after its lease was stolen commits nothing; the thief's
    writes commit exactly once."""
    first_started, release = threading.Event(), threading.Event()
    insert = sql.SQL("INSERT INTO {} VALUES (%s, %s, %s)").format(ledger)

    def handler(run: pgsched.Run) -> int:
        assert isinstance(run.conn, psycopg.Connection)
        run.conn.execute(insert, (run.plan_time.isoformat(), run.attempt, run.runner_id))
        if run.attempt == 1:
            first_started.set()
            release.wait(20)  # still writing when its lease is taken
        return 1

    options = LeaseTimes(run_timeout="20s", stale_timeout="30s", heartbeat_interval="1s")
    a, b = make_scheduler("A", max_concurrency=1), make_scheduler("B", max_concurrency=1)
    for s in (a, b):
        s.register(handler, name="tx", every="1d", max_attempts=3, transactional=True, **options)

    with running(a):
        assert first_started.wait(10)
        (row,) = rows(db, migrated)

        def steal() -> bool:
            make_stale(db, migrated, row["id"])  # A heartbeats, so repeat until B wins
            return b.run_once().stolen == 1

        wait_until(steal, 15, "B to steal A's lease", interval=0)
        release.set()
        wait_until(
            lambda: (
                a.metrics.registry.get_sample_value("pgsched_leases_lost_total", {"job": "tx"}) == 1
            ),
            10,
            "A to notice it lost the lease",
        )

    final = row_by_id(db, migrated, row["id"])
    assert (final["status"], final["runner_id"], final["attempt"]) == ("SUCCESS", "B", 2)
    assert ledger_rows(db, ledger) == [(row["plan_time"].isoformat(), 2, "B")]


def test_run_conn_has_session_timeouts(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    seen: dict[str, str] = {}

    async def handler(run: pgsched.Run) -> None:
        assert isinstance(run.conn, psycopg.AsyncConnection)
        for name in ("statement_timeout", "idle_in_transaction_session_timeout"):
            cur = await run.conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(name)))
            row = await cur.fetchone()
            assert row is not None
            seen[name] = row[0]
        await asyncio.sleep(0)

    s = make_scheduler()
    s.register(handler, name="tx", every="1h", transactional=True, run_timeout="45s")
    s.run_once()
    assert seen == {"statement_timeout": "45s", "idle_in_transaction_session_timeout": "55s"}


def test_jit_and_time_zone_are_pgsched_s_own_and_left_to_the_server_for_the_handler(
    migrated: str, db: Any, runtime_dsn: str
) -> None:
    """pgsched's own statements run without JIT compilation (over a long partitioned history
    it cost more than the statements), in UTC (cheaper timestamps for every run claimed) and
    with random_page_cost at most 1.1 (rows found by key), but a transactional handler's
    statements on ``run.conn`` keep the server's settings (here a session default of
    America/New_York and 4, PostgreSQL's default random_page_cost, given in the DSN)."""
    assert db.execute("SHOW jit").fetchone()[0] == "on"  # PostgreSQL's default
    dsn = make_conninfo(runtime_dsn, options="-c TimeZone=America/New_York -c random_page_cost=4")
    show = (
        "SELECT current_setting('jit'), current_setting('TimeZone'),"
        " current_setting('random_page_cost')"
    )
    seen: list[tuple[str, str, str]] = []

    async def handler(run: pgsched.Run) -> None:
        assert isinstance(run.conn, psycopg.AsyncConnection)
        row = await (await run.conn.execute(show)).fetchone()
        assert row is not None
        seen.append(row)

    s = pgsched.Scheduler(dsn=dsn, schema=migrated, runner_id="r1")
    s.register(handler, name="tx", every="1h", transactional=True)
    s.run_once()
    assert seen == [("on", "America/New_York", "4")]

    async def operator_session() -> tuple[str, str, str]:
        admin = pgsched.AsyncAdmin(dsn, schema=migrated)
        async with admin, admin._conn() as conn:  # the connection its operations use
            row: tuple[str, str, str] | None = await (await conn.execute(show)).fetchone()
            assert row is not None
            return row

    assert asyncio.run(operator_session()) == ("off", "UTC", "1.1")
