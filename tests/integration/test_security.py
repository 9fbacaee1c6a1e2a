"""Security (reliability item 6): schedulers run as the least-privilege runtime role, and
every connection pgsched holds has statement_timeout and idle_in_transaction_session_timeout,
so a stuck session cannot hold row locks for ever."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgsched
from pgsched._facades.admin import Admin
from tests.integration.conftest import SchedulerFactory
from tests.support.roles import DbRoles
from tests.support.rows import as_role, table

pytestmark = pytest.mark.usefixtures("migrated")

SETTINGS = (
    "SELECT current_user::text, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),"
    " current_setting('statement_timeout'),"
    " current_setting('idle_in_transaction_session_timeout')"
)


async def _pooled(s: pgsched.Scheduler, query: str) -> tuple[Any, ...]:
    """``query``'s row on a connection borrowed from the scheduler's own pool."""
    async with s._pool() as pool, pool.connection() as conn:
        row = await (await conn.execute(query)).fetchone()
        assert row is not None
        return tuple(row)


def test_schedulers_connect_as_the_runtime_role(
    make_scheduler: SchedulerFactory, db_roles: DbRoles, migrated: str, db: Any
) -> None:
    if not db_roles.enabled:
        pytest.skip("the test database user cannot create roles")
    s = make_scheduler()
    user, superuser, _, _ = asyncio.run(_pooled(s, SETTINGS))
    assert (user, superuser) == (db_roles.runtime, False)
    # ... which can run a job (DML) but cannot migrate (no DDL).
    s.register(lambda run: 1, name="dml_only", every="1h")
    assert s.run_once().succeeded == 1
    with pytest.raises(pgsched.DatabaseError, match="InsufficientPrivilege") as refused:
        _migrate_again(s, db)
    assert isinstance(refused.value.__cause__, psycopg.errors.InsufficientPrivilege)


def _migrate_again(s: pgsched.Scheduler, db: Any) -> None:
    """Drop the last migration's record, then let the runtime role try to apply it."""
    db.execute(
        sql.SQL("DELETE FROM {} WHERE version = (SELECT max(version) FROM {})").format(
            table(s.schema, "schema_migrations"), table(s.schema, "schema_migrations")
        )
    )
    s.migrate()


def test_the_runtime_role_has_no_ddl(
    make_scheduler: SchedulerFactory, db_roles: DbRoles, migrated: str, db: Any
) -> None:
    if not db_roles.enabled:
        pytest.skip("the test database user cannot create roles")
    s = make_scheduler()
    for statement in (
        "CREATE TABLE {} (a int)",
        "DROP TABLE {}",
        "ALTER TABLE {} ADD COLUMN x int",
    ):
        target = table(migrated, "intruder" if statement.startswith("CREATE") else "job_state")
        query = sql.SQL(statement).format(target).as_string(db)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            asyncio.run(_pooled(s, query))


@pytest.mark.parametrize(
    ("options", "statement", "idle"),
    [({}, "30s", "1min"), ({"statement_timeout": "1s"}, "1s", "2s")],
    ids=["default", "1s"],
)
def test_pooled_connections_have_both_timeouts(
    make_scheduler: SchedulerFactory, options: dict[str, Any], statement: str, idle: str
) -> None:
    s = make_scheduler(**options)
    _, _, got_statement, got_idle = asyncio.run(_pooled(s, SETTINGS))
    assert (got_statement, got_idle) == (statement, idle)


def test_a_stuck_statement_on_a_pooled_connection_is_cancelled(
    make_scheduler: SchedulerFactory,
) -> None:
    s = make_scheduler(statement_timeout="1s")
    started = time.monotonic()
    with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
        asyncio.run(_pooled(s, "SELECT pg_sleep(10)"))
    # guard against an order-of-magnitude regression (typically ~1 s: the statement_timeout),
    # not a performance claim: those live in bench/
    assert time.monotonic() - started < 5


def test_an_idle_transaction_holding_a_row_lock_is_killed(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler(statement_timeout="1s")  # so idle transactions may last 2 s
    job_state = table(migrated, "job_state")
    db.execute(sql.SQL("INSERT INTO {} (job_name) VALUES ('locked')").format(job_state))
    lock = sql.SQL("SELECT job_name FROM {} WHERE job_name = 'locked' FOR UPDATE NOWAIT").format(
        job_state
    )
    observed: dict[str, Any] = {}

    async def hold_and_forget() -> None:
        async with s._pool() as pool, pool.connection() as conn:
            await conn.execute("BEGIN")
            await conn.execute(lock)  # a row lock, then the session goes quiet
            with pytest.raises(psycopg.errors.LockNotAvailable):
                db.execute(lock)  # held, as long as the transaction lives
            # 2x the 2 s idle timeout, which the server enforces: a generous margin, not a
            # performance claim
            await asyncio.sleep(4)
            try:
                await conn.execute("SELECT 1")
                observed["after"] = "alive"
            except psycopg.Error as exc:  # IdleInTransactionSessionTimeout (25P03)
                observed["after"] = f"{type(exc).__name__}: {exc}"

    asyncio.run(hold_and_forget())
    assert "idle-in-transaction timeout" in observed["after"], observed
    db.execute(lock)  # the lock went with the session


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_transactional_runs_connection_has_both_timeouts(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, kind: str
) -> None:
    s = make_scheduler()
    query = (
        "SELECT current_setting('statement_timeout'),"
        " current_setting('idle_in_transaction_session_timeout'), current_user::text"
    )

    if kind == "sync":

        def handler(run: pgsched.Run) -> pgsched.Result:
            assert isinstance(run.conn, psycopg.Connection)
            row = run.conn.execute(query).fetchone()
            assert row is not None
            return pgsched.Result(data=list(row))

    else:

        async def handler(run: pgsched.Run) -> pgsched.Result:  # type: ignore[misc]
            assert isinstance(run.conn, psycopg.AsyncConnection)
            row = await (await run.conn.execute(query)).fetchone()
            assert row is not None
            return pgsched.Result(data=list(row))

    s.register(handler, name="tx", every="1h", run_timeout="5s", transactional=True)
    assert s.run_once().succeeded == 1
    (result,) = db.execute(
        sql.SQL("SELECT result FROM {} WHERE job_name = 'tx'").format(table(migrated))
    ).fetchone()
    # run_timeout, and run_timeout + 10 s for an idle transaction
    assert result[:2] == ["5s", "15s"]


def test_operator_connections_have_both_timeouts_too(runtime_dsn: str, migrated: str) -> None:
    admin = Admin(dsn=runtime_dsn, schema=migrated)

    async def show() -> tuple[str, str]:
        async with admin._connections.connect() as conn:
            row = await (await conn.execute(SETTINGS)).fetchone()
            assert row is not None
            return row[2], row[3]

    statement, idle = asyncio.run(show())
    assert statement != "0" and idle != "0", (statement, idle)


def test_as_role_creates_tables_the_runtime_role_can_write(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, db_roles: DbRoles
) -> None:
    """The helper the transactional tests use: a table made by the owner gets the runtime
    role's DML through sql/roles.sql's default privileges."""
    target = table(migrated, "app_table")
    with as_role(db, db_roles.owner):
        db.execute(sql.SQL("CREATE TABLE {} (a int)").format(target))
    s = make_scheduler()

    def write(run: pgsched.Run) -> int:
        assert isinstance(run.conn, psycopg.Connection)
        run.conn.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(target))
        return 1

    s.register(write, name="writer", every="1h", transactional=True)
    assert s.run_once().succeeded == 1
    assert db.execute(sql.SQL("SELECT count(*) FROM {}").format(target)).fetchone() == (1,)
