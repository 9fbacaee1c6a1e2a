"""Migrations: idempotent, safe concurrently, and the tables and columns pgsched relies on."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import sql

import pgsched
from pgsched._storage.store import migration_files
from tests.support.rows import rows, table
from tests.support.threads import run_together

VERSIONS = [version for version, _, _ in migration_files()]
TS = "timestamp with time zone"

# The ledger's columns: column -> (information_schema data_type, is_nullable)
CRON_EXECUTIONS = {
    "id": ("uuid", "NO"),
    "job_name": ("text", "NO"),
    "scope_kind": ("text", "NO"),
    "scope_id": ("text", "NO"),
    "plan_time": (TS, "NO"),
    "trigger": ("text", "NO"),
    "status": ("text", "NO"),
    "attempt": ("integer", "NO"),
    "max_attempts": ("integer", "NO"),
    "next_retry_at": (TS, "YES"),
    "runner_id": ("text", "YES"),
    "lease_token": ("uuid", "NO"),
    "fencing_token": ("bigint", "NO"),
    "heartbeat_at": (TS, "YES"),
    "stale_after": (TS, "YES"),
    "started_at": (TS, "YES"),
    "finished_at": (TS, "YES"),
    "duration_ms": ("integer", "YES"),
    "rows_affected": ("bigint", "YES"),
    "result": ("jsonb", "NO"),
    "error_code": ("text", "YES"),
    "error_msg": ("text", "YES"),
    "created_at": (TS, "NO"),
    "updated_at": (TS, "NO"),
}


def columns(db: psycopg.Connection[Any], schema: str, name: str) -> dict[str, tuple[str, str]]:
    found = db.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s",
        (schema, name),
    ).fetchall()
    return {c: (t, n) for c, t, n in found}


def column_default(db: psycopg.Connection[Any], schema: str, name: str, col: str) -> str:
    found = db.execute(
        "SELECT column_default FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = %s AND column_name = %s",
        (schema, name, col),
    ).fetchone()
    assert found is not None
    return str(found[0])


def indexes(
    db: psycopg.Connection[Any], schema: str, name: str
) -> list[tuple[bool, bool, bool, list[str]]]:
    """(primary, unique, total (not partial), columns in order) of every index of a table."""
    regclass = sql.Identifier(schema, name).as_string(db)
    return [
        (primary, unique, total, list(cols))
        for primary, unique, total, cols in db.execute(
            """
            SELECT i.indisprimary, i.indisunique, i.indpred IS NULL,
                   ARRAY(SELECT a.attname::text
                         FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
                         JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                         ORDER BY k.ord)
            FROM pg_index i WHERE i.indrelid = to_regclass(%s)
            """,
            (regclass,),
        ).fetchall()
    ]


def partitions(db: psycopg.Connection[Any], schema: str) -> list[str]:
    """The ledger's range partitions, by name."""
    found = db.execute(
        sql.SQL("SELECT name FROM {} ORDER BY lo").format(table(schema, "cron_partitions"))
    ).fetchall()
    return [name for (name,) in found]


def test_migrate_twice_is_idempotent(make_scheduler: Any, db: Any, schema: str) -> None:
    s = make_scheduler(role="owner")  # the owner migrates; the runtime role has no DDL
    assert VERSIONS, "no migration files found"
    assert s.migrate() == VERSIONS
    assert s.migrate() == []
    applied = db.execute(
        sql.SQL("SELECT version FROM {} ORDER BY version").format(
            table(schema, "schema_migrations")
        )
    ).fetchall()
    assert [v for (v,) in applied] == VERSIONS


def test_eight_concurrent_migrations_of_a_fresh_schema(
    make_scheduler: Any, db: Any, schema: str
) -> None:
    schedulers = [make_scheduler(f"m{i}", role="owner") for i in range(8)]
    results = run_together([s.migrate for s in schedulers])
    # Each migration commits on its own (migration 13 validates under a weak lock before 14
    # takes a strong one), so concurrent migrators may share the versions: each is applied once.
    assert sorted(v for applied in results for v in applied) == VERSIONS, results
    per_version = db.execute(
        sql.SQL("SELECT version, count(*) FROM {} GROUP BY version ORDER BY version").format(
            table(schema, "schema_migrations")
        )
    ).fetchall()
    assert per_version == [(v, 1) for v in VERSIONS]
    # and again, concurrently, on the migrated schema: nothing to do, nothing fails
    assert run_together([s.migrate for s in schedulers]) == [[]] * 8
    assert rows(db, schema) == []


def test_cron_executions_matches_the_spec(migrated: str, db: Any) -> None:
    actual = columns(db, migrated, "cron_executions")
    mismatched = {
        col: (want, actual.get(col))
        for col, want in CRON_EXECUTIONS.items()
        if actual.get(col) != want
    }
    assert not mismatched, f"column (expected, actual): {mismatched}"
    assert "'global'" in column_default(db, migrated, "cron_executions", "scope_kind")
    assert "'global'" in column_default(db, migrated, "cron_executions", "scope_id")
    assert "'{}'" in column_default(db, migrated, "cron_executions", "result")

    found = indexes(db, migrated, "cron_executions")
    # Partitioned on plan_time: ids have a unique index in every partition (none can span
    # them), and the plan key stays unique (it holds the partition key).
    for part in ("cron_executions_default", *partitions(db, migrated)):
        assert (False, True, True, ["id"]) in indexes(db, migrated, part), part
    plan_keys = [
        cols
        for primary, unique, total, cols in found
        if unique
        and total
        and sorted(cols) == sorted(["job_name", "scope_kind", "scope_id", "plan_time"])
    ]
    assert plan_keys, f"no unique key (job_name, scope_kind, scope_id, plan_time): {found}"


def test_job_state_and_schema_migrations_exist(migrated: str, db: Any) -> None:
    job_state = columns(db, migrated, "job_state")
    assert job_state.get("job_name") == ("text", "NO")
    assert job_state.get("paused") == ("boolean", "NO")
    assert "updated_at" in job_state
    assert (True, True, True, ["job_name"]) in indexes(db, migrated, "job_state")
    assert columns(db, migrated, "schema_migrations"), "schema_migrations is missing"


def test_schema_name_that_needs_quoting(pg_dsn: str, db: Any) -> None:
    name = f'Odd "Schema"-{uuid.uuid4().hex[:8]}'
    try:
        s = pgsched.Scheduler(dsn=pg_dsn, schema=name, runner_id="odd")
        seen: list[str] = []

        @s.job(every="1d")
        def odd(run: pgsched.Run) -> None:
            seen.append(run.job)

        assert s.migrate() == VERSIONS
        report = s.run_once()
        assert report.claimed == 1 and report.succeeded == 1
        assert seen == ["odd"]
        assert [r["status"] for r in rows(db, name)] == ["SUCCESS"]
    finally:
        db.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
