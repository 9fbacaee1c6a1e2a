"""Rows of the tests' schema: the database clock, reading and seeding ``cron_executions``, a
terminal write through pgsched's own SQL layer, statements with ``{s}`` for the schema, and
statements run as another role."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from pgsched._records import Finish
from pgsched._storage.store import Store

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Conn = psycopg.Connection[Any]


def db_now(db: Conn) -> datetime:
    """The database's clock (the only clock pgsched uses)."""
    row = db.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None
    now: datetime = row[0]
    return now.astimezone(UTC)


def floor_to(t: datetime, step: timedelta) -> datetime:
    """``t`` floored to a multiple of ``step`` since the Unix epoch (cadence plan alignment)."""
    return EPOCH + ((t - EPOCH) // step) * step


def table(schema: str, name: str = "cron_executions") -> sql.Composable:
    return sql.Identifier(schema, name)


def rows(db: Conn, schema: str, job: str | None = None) -> list[dict[str, Any]]:
    """Every execution row (of ``job``), ordered by plan, scope."""
    query = sql.SQL(
        "SELECT * FROM {} {} ORDER BY plan_time, scope_kind, scope_id, created_at"
    ).format(table(schema), sql.SQL("WHERE job_name = %s" if job is not None else ""))
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(query, (job,) if job is not None else None)
        return cur.fetchall()


def row_by_id(db: Conn, schema: str, ident: UUID) -> dict[str, Any]:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(sql.SQL("SELECT * FROM {} WHERE id = %s").format(table(schema)), (ident,))
        found = cur.fetchone()
    assert found is not None, f"no row {ident}"
    return found


def count(db: Conn, schema: str, where: str = "true", params: tuple[Any, ...] = ()) -> int:
    query = sql.SQL("SELECT count(*) FROM {} WHERE ").format(table(schema)) + sql.SQL(where)
    row = db.execute(query, params).fetchone()
    assert row is not None
    return int(row[0])


def insert_row(db: Conn, schema: str, **cols: Any) -> dict[str, Any]:
    """Seed one execution row with the given columns (the table's defaults fill the rest)."""
    cols.setdefault("scope_kind", "global")
    cols.setdefault("scope_id", "global")
    cols.setdefault("trigger", "schedule")
    names = list(cols)
    query = sql.SQL("INSERT INTO {} ({}) VALUES ({}) RETURNING *").format(
        table(schema),
        sql.SQL(", ").join(sql.Identifier(n) for n in names),
        sql.SQL(", ").join(sql.Placeholder() for _ in names),
    )
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(query, [cols[n] for n in names])
        out = cur.fetchone()
    assert out is not None
    return out


def insert_due_cursors(db: Conn, schema: str, count: int, job: str = "j") -> None:
    """``count`` cursors of ``job`` (scopes ``t:1`` .. ``t:count``), due now."""
    db.execute(
        sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, next_plan_time, due_at, spec,"
            " first_seen_at, updated_at) SELECT %s, 't', g::text, now(), now(), 's', now(),"
            " now() FROM generate_series(1, %s) g"
        ).format(table(schema, "cron_cursors")),
        (job, count),
    )


def seed_running(
    db: Conn,
    schema: str,
    job: str,
    plan_time: datetime,
    *,
    stale_in: timedelta,
    attempt: int = 1,
    max_attempts: int = 3,
    runner_id: str = "old-runner",
    scope: pgsched.Scope = pgsched.GLOBAL,
) -> dict[str, Any]:
    """A RUNNING row held by ``runner_id``; ``stale_in`` < 0 makes its lease already stale."""
    now = db_now(db)
    return insert_row(
        db,
        schema,
        job_name=job,
        scope_kind=scope.kind,
        scope_id=scope.id,
        plan_time=plan_time,
        status="RUNNING",
        attempt=attempt,
        max_attempts=max_attempts,
        runner_id=runner_id,
        heartbeat_at=now - timedelta(minutes=10),
        started_at=now - timedelta(minutes=10),
        stale_after=now + stale_in,
    )


def make_stale(db: Conn, schema: str, ident: UUID) -> None:
    """Move a RUNNING row's lease into the past (simulates a holder that stopped heartbeating)."""
    db.execute(
        sql.SQL(
            "UPDATE {} SET stale_after = clock_timestamp() - interval '1 second' "
            "WHERE id = %s AND status = 'RUNNING'"
        ).format(table(schema)),
        (ident,),
    )


def finish_with_token(
    dsn: str, schema: str, ident: UUID, token: UUID, status: str = "SUCCESS"
) -> dict[UUID, datetime | None]:
    """A terminal write through pgsched's own SQL layer, as the holder of ``token`` would do."""

    async def go() -> dict[UUID, datetime | None]:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            query = sql.SQL("SELECT plan_time FROM {} WHERE id = %s").format(table(schema))
            found = await (await conn.execute(query, (ident,))).fetchone()
            assert found is not None, f"no execution {ident}"
            fin = Finish(ident, token, found[0], status, None, None, 99, '{"by": "old"}', 1, None)
            return await Store(schema).finish(conn, [fin])

    return asyncio.run(go())


def in_schema(
    conn: Conn, schema: str, text: str, params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run ``text`` with ``{s}`` standing for ``schema``; its rows."""
    return conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params).fetchall()


@contextmanager
def as_role(db: Conn, role: str | None) -> Iterator[None]:
    """Run the block's statements on ``db`` as ``role`` (e.g. the schema owner, so that the
    tables it creates get the runtime role's default privileges); no-op for None."""
    if role is None:
        yield
        return
    db.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        yield
    finally:
        db.execute("RESET ROLE")


def estimated_rows(db: Conn, schema: str, name: str) -> float:
    """The planner's row count of the table ``name`` (-1 or 0 until it is first analyzed)."""
    qualified = sql.SQL("{}").format(table(schema, name)).as_string(db)
    row = db.execute("SELECT reltuples FROM pg_class WHERE oid = to_regclass(%s)", (qualified,))
    found = row.fetchone()
    assert found is not None
    return float(found[0])


def partition_holding(db: Conn, schema: str, ident: UUID) -> str | None:
    """The name of the ledger's partition that holds the row ``ident``."""
    row = db.execute(
        sql.SQL("SELECT tableoid::regclass::text FROM {} WHERE id = %s").format(table(schema)),
        (ident,),
    ).fetchone()
    return None if row is None else str(row[0]).split(".")[-1].strip('"')


def partition_of(db: Conn, schema: str, job: str) -> str:
    """The partition holding ``job``'s rows (one plan: one partition)."""
    found = {partition_holding(db, schema, row["id"]) for row in rows(db, schema, job)}
    assert len(found) == 1 and None not in found, found
    return str(found.pop())


def inserted(db: Conn, schema: str, name: str) -> int:
    """Rows inserted into the table ``name`` as the server's statistics count them (a
    session's counts reach them when it ends, or in its idle moments)."""
    row = db.execute(
        "SELECT n_tup_ins FROM pg_stat_user_tables WHERE schemaname = %s AND relname = %s",
        (schema, name),
    ).fetchone()
    return int(row[0]) if row else 0


def job_index_reads(db: Conn, schema: str, name: str) -> int:
    """Entries read so far in the ledger partition ``name``'s index of (job, plan time).
    Found by its columns in the catalog, not by ``pg_indexes``: that view formats every
    index of the database, and one dropped meanwhile by a concurrent test fails it."""
    row = db.execute(
        "SELECT coalesce(sum(s.idx_tup_read), 0) FROM pg_stat_user_indexes s"
        " JOIN pg_index x ON x.indexrelid = s.indexrelid"
        " WHERE s.relid = to_regclass(%s) AND x.indpred IS NULL"
        " AND (SELECT array_agg(a.attname ORDER BY k.n)"
        "      FROM unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, n)"
        "      JOIN pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = k.attnum)"
        "     = ARRAY['job_name', 'plan_time']::name[]",
        (sql.SQL("{}").format(table(schema, name)).as_string(db),),
    ).fetchone()
    assert row is not None
    return int(row[0])


def rewrite_after_read(monkeypatch: Any, owner: type, read: str, rewrite: sql.Composable) -> Any:
    """Patch ``owner.read`` (a claim's first statement, e.g. ``ClaimStore.due_cursors``) to run
    ``rewrite`` in the claim's own transaction after it: a new version of the rows it read,
    at another address. Returns the original, to put back with ``monkeypatch.setattr``."""
    original = getattr(owner, read)

    async def read_then_rewrite(self: Any, conn: Any, *args: Any) -> Any:
        found = await original(self, conn, *args)
        await conn.execute(rewrite)
        return found

    monkeypatch.setattr(owner, read, read_then_rewrite)
    return original


def app_table(db: Conn, schema: str, owner: str | None, name: str, columns: str) -> sql.Composable:
    """An application's table ``name`` (``columns``: its column list, SQL) in ``schema``,
    created by the schema's ``owner`` role as the application's migrations would, so the
    runtime role the schedulers run as may write it (sql/roles.sql's default privileges)."""
    created = table(schema, name)
    with as_role(db, owner):
        db.execute(sql.SQL("CREATE TABLE {} ({})").format(created, sql.SQL(columns)))
    return created
