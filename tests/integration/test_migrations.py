"""Migrations: idempotent, safe concurrently, and the tables and columns pgsched relies on."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgsched
from pgsched._storage.statements import migration_files
from tests.support.migrations import migrate_to
from tests.support.rows import db_now, insert_row, partition_holding, rows, table
from tests.support.threads import run_together
from tests.support.waiting import wait_until

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
    "stolen": ("boolean", "NO"),
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


def attempt_checks(db: psycopg.Connection[Any], schema: str) -> dict[str, str]:
    """The attempt constraint of the ledger and of each of its partitions, by table."""
    found = db.execute(
        """
        SELECT c.relname::text, pg_get_constraintdef(k.oid)
        FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
        WHERE c.relnamespace = to_regnamespace(%s)
          AND c.relname LIKE 'cron_executions%%' AND k.conname = 'cron_executions_attempt_check'
        """,
        (sql.Identifier(schema).as_string(db),),
    ).fetchall()
    return dict(found)


def test_a_steal_may_take_a_row_one_attempt_past_max_attempts_in_every_partition(
    pg_dsn: str, schema: str, db: Any
) -> None:
    # A ledger written by version 11 (its table becomes the legacy partition), upgraded by
    # this version's migrate: rows of the legacy, a day's partition and the DEFAULT one may reach
    # attempt = max_attempts + 1 (a steal after a crash), never more.
    migrate_to(pg_dsn, schema, "0011")
    now = db_now(db)
    legacy = insert_row(
        db, schema, job_name="old", plan_time=now - timedelta(days=3), status="RUNNING"
    )
    applied = pgsched.Scheduler(dsn=pg_dsn, schema=schema).migrate()
    assert applied == [v for v in VERSIONS if v > "0011"]
    # (the legacy partition holds the plans up to the end of the upgrade's day)
    soon = insert_row(
        db, schema, job_name="new", plan_time=now + timedelta(days=2), status="RUNNING"
    )
    far = insert_row(
        db, schema, job_name="far", plan_time=now + timedelta(days=3650), status="PENDING"
    )
    held = [partition_holding(db, schema, r["id"]) for r in (legacy, soon, far)]
    assert held[0] == "cron_executions_legacy" and held[2] == "cron_executions_default", held
    assert len(set(held)) == 3, held
    attempt = sql.SQL("UPDATE {} SET attempt = %s WHERE id = %s").format(table(schema))
    for row in (legacy, soon, far):
        assert row["max_attempts"] == 1
        db.execute(attempt, (2, row["id"]))
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute(attempt, (3, row["id"]))
        with pytest.raises(psycopg.errors.CheckViolation):
            db.execute(attempt, (0, row["id"]))
    checks = attempt_checks(db, schema)
    assert set(checks) >= {"cron_executions", *held}, checks
    assert all("(max_attempts + 1)" in d for d in checks.values()), checks
    # a partition made after the upgrade has it too
    later = insert_row(
        db, schema, job_name="later", plan_time=now + timedelta(days=20), status="PENDING"
    )
    holding = partition_holding(db, schema, later["id"])
    assert holding is not None
    assert "(max_attempts + 1)" in attempt_checks(db, schema)[holding]


def test_migration_18_waits_for_a_transaction_holding_the_ledger(
    pg_dsn: str, schema: str, db: Any
) -> None:
    # Its ACCESS EXCLUSIVE lock request waits a second at a time (lock_timeout), so readers
    # are not queued behind it while a transactional run holds the ledger.
    migrate_to(pg_dsn, schema, "0017")
    waiting = sql.SQL(
        "SELECT count(*) FROM pg_locks WHERE relation = {}::regclass"
        " AND mode = 'AccessExclusiveLock' AND NOT granted"
    ).format(sql.Literal(f"{schema}.cron_executions"))
    outcome: list[Any] = []
    migrator = pgsched.Scheduler(dsn=pg_dsn, schema=schema)
    with psycopg.connect(pg_dsn) as holder, psycopg.connect(pg_dsn, autocommit=True) as reader:
        insert_row(holder, schema, job_name="long", plan_time=db_now(db), status="RUNNING")
        migrating = threading.Thread(target=lambda: outcome.append(migrator.migrate()))
        migrating.start()
        wait_until(lambda: db.execute(waiting).fetchone()[0] == 1, 30, "the migration's lock try")
        reader.execute("SET statement_timeout = '3s'")
        started = time.monotonic()
        while time.monotonic() - started < 3:
            reader.execute(sql.SQL("SELECT count(*) FROM {}").format(table(schema))).fetchone()
        assert outcome == []
        assert "(max_attempts + 1)" not in attempt_checks(db, schema)["cron_executions"]
        holder.commit()
        migrating.join(30)
    assert outcome == [[v for v in VERSIONS if v > "0017"]], outcome
    assert "(max_attempts + 1)" in attempt_checks(db, schema)["cron_executions"]


def test_migration_24_marks_no_row_of_an_upgraded_ledger_stolen_in_any_partition(
    pg_dsn: str, schema: str, db: Any
) -> None:
    # A ledger of version 23 with rows in its partitions: the upgrade gives every partition
    # the column, false for the rows already there (none is known to be stolen), and running
    # it again changes nothing.
    migrate_to(pg_dsn, schema, "0023")
    now = db_now(db)
    soon = insert_row(
        db, schema, job_name="new", plan_time=now + timedelta(days=2), status="FAILED"
    )
    far = insert_row(
        db, schema, job_name="far", plan_time=now + timedelta(days=3650), status="PENDING"
    )
    assert "stolen" not in columns(db, schema, "cron_executions")
    scheduler = pgsched.Scheduler(dsn=pg_dsn, schema=schema)
    assert scheduler.migrate() == [v for v in VERSIONS if v > "0023"]
    assert scheduler.migrate() == []
    for row in (soon, far):
        part = partition_holding(db, schema, row["id"])
        assert part is not None
        assert columns(db, schema, part)["stolen"] == ("boolean", "NO"), part
        got = db.execute(
            sql.SQL("SELECT stolen FROM {} WHERE id = %s").format(table(schema)), (row["id"],)
        ).fetchone()
        assert got is not None and got[0] is False, part


def test_migration_26_lets_every_partition_hold_a_task_failed_row(
    pg_dsn: str, schema: str, db: Any
) -> None:
    # A ledger of version 25 refuses error_code 'task_failed'; after the upgrade each
    # partition takes it (the far one too), the row already there is untouched, and running
    # it again changes nothing.
    migrate_to(pg_dsn, schema, "0025")
    now = db_now(db)
    old = insert_row(db, schema, job_name="celery:e", plan_time=now, status="SUCCESS")
    far = insert_row(
        db, schema, job_name="celery:e", plan_time=now + timedelta(days=3650), status="SUCCESS"
    )
    fail = sql.SQL("UPDATE {} SET status = 'FAILED', error_code = 'task_failed' WHERE id = %s")
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(fail.format(table(schema)), (old["id"],))
    scheduler = pgsched.Scheduler(dsn=pg_dsn, schema=schema)
    assert scheduler.migrate() == [v for v in VERSIONS if v > "0025"]
    assert scheduler.migrate() == []
    for row in (old, far):
        db.execute(fail.format(table(schema)), (row["id"],))
    with pytest.raises(psycopg.errors.CheckViolation):
        db.execute(
            sql.SQL("UPDATE {} SET error_code = 'nonsense' WHERE id = %s").format(table(schema)),
            (far["id"],),
        )
