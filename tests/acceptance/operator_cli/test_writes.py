"""The commands that change things, as an operator meets them (real ``python -m pgsched``
subprocesses): trigger, cancel, pause, resume, backfill and prune, and their one-line
errors."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

from tests.acceptance.operator_cli.ops import (
    HOUR,
    Ops,
    assert_one_line_error,
    current_plan,
    trigger,
)
from tests.support.rows import count, db_now, insert_row, row_by_id, rows, table

pytestmark = pytest.mark.acceptance


# -- trigger ------------------------------------------------------------------------------


def test_trigger_inserts_a_pending_manual_run(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    before = db_now(db)
    out = ops.ok("trigger", "hourly").strip()
    after = db_now(db)
    ident = uuid.UUID(out)  # stdout is exactly the execution id
    row = row_by_id(db, schema, ident)
    assert (row["job_name"], row["status"], row["trigger"]) == ("hourly", "PENDING", "manual")
    assert (row["scope_kind"], row["scope_id"]) == ("global", "global")
    assert before <= row["plan_time"] <= after, "a trigger is planned at the database's now"

    again = ops.ok("trigger", "hourly")
    assert again.startswith(out) and "not created" in again and "PENDING" in again, again
    assert count(db, schema, "status = 'PENDING' AND job_name = 'hourly'") == 1

    # --scope and --at are honoured; --at with an offset is stored in UTC (instants between two
    # of the hourly plans: one at a plan adds nothing, tests/acceptance/operator_cli/test_triggers)
    scoped = trigger(ops, "per_tenant", "--scope", "tenant:a", "--at", "2030-01-01T09:30:00+02:00")
    row = row_by_id(db, schema, scoped)
    assert (row["scope_kind"], row["scope_id"]) == ("tenant", "a")
    assert row["plan_time"] == datetime(2030, 1, 1, 7, 30, tzinfo=UTC)
    assert (row["status"], row["trigger"]) == ("PENDING", "manual")

    # without an offset --at is UTC
    naive = trigger(ops, "per_tenant", "--scope", "tenant:b", "--at", "2030-01-01T09:30")
    row = row_by_id(db, schema, naive)
    assert (row["scope_kind"], row["scope_id"]) == ("tenant", "b")
    assert row["plan_time"] == datetime(2030, 1, 1, 9, 30, tzinfo=UTC)
    assert naive != scoped


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("trigger", "nope"), ("'nope'",)),
        (("trigger", "hourly", "--scope", "tenant"), ("'tenant'", "KIND:ID")),
        (("trigger", "hourly", "--scope", ":x"), ("':x'", "KIND:ID")),
        (("trigger", "hourly", "--scope", "tenant:"), ("KIND:ID",)),
        (("trigger", "hourly", "--at", "tomorrow"), ("--at", "'tomorrow'")),
        (("trigger", "hourly", "--at", "2030-13-45T99:00"), ("--at",)),
    ],
)
def test_trigger_errors_are_one_line(
    ops: Ops, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    before = count(ops.db, ops.schema)
    assert_one_line_error(ops(*args), *needles)
    assert count(ops.db, ops.schema) == before, "a refused trigger inserts nothing"


# -- cancel -------------------------------------------------------------------------------


def test_cancel(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    ident = ops.ok("trigger", "hourly").strip()
    out = ops.ok("cancel", ident)
    assert ident in out
    row = row_by_id(db, schema, uuid.UUID(ident))
    assert row["status"] == "CANCELLED" and row["finished_at"] is not None

    # a new trigger is a new run once the old one is cancelled
    again = ops.ok("trigger", "hourly").strip()
    assert again != ident
    assert row_by_id(db, schema, uuid.UUID(again))["status"] == "PENDING"

    done = current_plan(ops)
    assert done["status"] == "SUCCESS"
    assert_one_line_error(ops("cancel", str(done["id"])), str(done["id"]), "SUCCESS", "PENDING")
    assert row_by_id(db, schema, done["id"]) == done
    assert_one_line_error(ops("cancel", ident), "CANCELLED", "PENDING")

    missing = str(uuid.uuid4())
    line = assert_one_line_error(ops("cancel", missing), missing)
    assert "does not exist" in line or "not found" in line, line
    assert_one_line_error(ops("cancel", "garbage"), "'garbage'")


# -- pause / resume -----------------------------------------------------------------------


def test_pause_and_resume_flip_job_state(ops: Ops) -> None:
    assert ops.job_row("hourly")["paused"] is False
    assert "paused hourly" in ops.ok("pause", "hourly")
    assert ops.job_row("hourly")["paused"] is True
    assert ops.job_row("per_tenant")["paused"] is False
    ops.ok("pause", "hourly")  # idempotent
    assert ops.job_row("hourly")["paused"] is True
    assert "resumed hourly" in ops.ok("resume", "hourly")
    assert ops.job_row("hourly")["paused"] is False

    for command in ("pause", "resume"):
        assert_one_line_error(ops(command, "nope"), "'nope'")
    found = ops.db.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE job_name = 'nope'").format(
            table(ops.schema, "job_state")
        )
    ).fetchone()
    assert found[0] == 0, "pausing an unknown job must not invent it"


# -- backfill -----------------------------------------------------------------------------


def test_backfill_queues_every_plan_in_range(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    day = datetime(2024, 1, 1, tzinfo=UTC)
    existing = insert_row(
        db,
        schema,
        job_name="per_tenant",
        scope_kind="tenant",
        scope_id="a",
        plan_time=day + 2 * HOUR,
        status="SUCCESS",
        runner_id="seed",
        finished_at=day + 2 * HOUR,
    )
    out = ops.ok(
        "backfill",
        "app.py",
        "per_tenant",
        "--from",
        "2024-01-01T00:00:00Z",
        "--to",
        "2024-01-01T05:00:00Z",
    )
    assert re.search(r"\b11\b", out), out  # 6 plans x 2 scopes, minus the existing one
    queued = [r for r in rows(db, schema, "per_tenant") if r["trigger"] == "backfill"]
    assert len(queued) == 11
    assert {r["status"] for r in queued} == {"PENDING"}
    assert {(r["scope_id"], r["plan_time"]) for r in queued} | {("a", day + 2 * HOUR)} == {
        (s, day + n * HOUR) for s in ("a", "b") for n in range(6)
    }
    assert row_by_id(db, schema, existing["id"]) == existing, "existing plans are left alone"

    again = ops.ok(
        "backfill",
        "app.py",
        "per_tenant",
        "--from",
        "2024-01-01T00:00:00Z",
        "--to",
        "2024-01-01T05:00:00Z",
    )
    assert re.search(r"\b0\b", again), again

    # --scope restricts the backfill to one scope
    out = ops.ok(
        "backfill",
        "app.py",
        "per_tenant",
        "--from",
        "2024-01-02T00:00:00Z",
        "--to",
        "2024-01-02T02:00:00Z",
        "--scope",
        "tenant:b",
    )
    assert re.search(r"\b3\b", out), out
    second_day = [r for r in rows(db, schema, "per_tenant") if r["plan_time"] >= day + 24 * HOUR]
    second_day = [r for r in second_day if r["plan_time"] < day + 48 * HOUR]
    assert sorted((r["scope_id"], r["plan_time"]) for r in second_day) == [
        ("b", day + 24 * HOUR + n * HOUR) for n in range(3)
    ]

    # bounds that are not on the cadence: only the plans inside the range
    out = ops.ok(
        "backfill", "app.py", "hourly", "--from", "2024-01-03T00:30Z", "--to", "2024-01-03T02:30Z"
    )
    assert re.search(r"\b2\b", out), out
    plans = {r["plan_time"] for r in rows(db, schema, "hourly") if r["trigger"] == "backfill"}
    assert plans == {day + 49 * HOUR, day + 50 * HOUR}


def test_backfill_errors_are_one_line(ops: Ops) -> None:
    before = count(ops.db, ops.schema)
    assert_one_line_error(
        ops(
            "backfill", "app.py", "nope", "--from", "2024-01-01T00:00Z", "--to", "2024-01-01T05:00Z"
        ),
        "'nope'",
    )
    assert_one_line_error(
        ops(
            "backfill",
            "app.py",
            "hourly",
            "--from",
            "2024-01-02T00:00Z",
            "--to",
            "2024-01-01T00:00Z",
        )
    )
    assert_one_line_error(
        ops("backfill", "app.py", "hourly", "--from", "yesterday", "--to", "2024-01-01T00:00Z"),
        "--from",
    )
    assert count(ops.db, ops.schema) == before


# -- prune --------------------------------------------------------------------------------


def test_prune_deletes_old_finished_rows_in_batches(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    t0 = datetime(2020, 1, 1, tzinfo=UTC)
    # 2,500 old SUCCESS rows: 5 scopes x 500 plans, finished 60 days ago
    db.execute(
        sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status,"
            " started_at, finished_at, duration_ms)"
            " SELECT 'hourly', 'shard', s::text, %(t0)s + n * interval '1 hour', 'schedule',"
            " 'SUCCESS', clock_timestamp() - interval '60 days',"
            " clock_timestamp() - interval '60 days', 1"
            " FROM generate_series(0, 4) AS s, generate_series(0, 499) AS n"
        ).format(table(schema)),
        {"t0": t0},
    )
    now = db_now(db)
    old, recent = now - timedelta(days=60), now - timedelta(days=1)
    special: dict[str, dict[str, Any]] = {
        "pending": dict(status="PENDING", trigger="manual"),
        "running": dict(status="RUNNING", started_at=old, stale_after=now + HOUR),
        "failed_retry": dict(
            status="FAILED",
            attempt=1,
            max_attempts=3,
            next_retry_at=now + HOUR,
            finished_at=old,
            error_code="handler_error",
        ),
        "failed_final": dict(status="FAILED", finished_at=old, error_code="handler_error"),
        "cancelled": dict(status="CANCELLED", trigger="manual", finished_at=old),
        "recent": dict(status="SUCCESS", finished_at=recent),
        "newest": dict(status="SUCCESS", finished_at=old),  # the scope's newest plan
    }
    ids = {
        name: insert_row(
            db,
            schema,
            job_name="hourly",
            scope_kind="special",
            scope_id="x",
            plan_time=t0 + n * HOUR,
            **cols,
        )["id"]
        for n, (name, cols) in enumerate(special.items())
    }
    before = count(db, schema)

    out = ops.ok("prune", "--older-than", "30d")
    match = re.search(r"(\d+)", out)
    assert match is not None, out
    assert int(match[1]) == 2495 + 2, out  # all but each shard's newest, + failed_final, cancelled
    assert count(db, schema) == before - 2497

    shards = db.execute(
        sql.SQL(
            "SELECT scope_id, count(*), max(plan_time) FROM {} WHERE scope_kind = 'shard'"
            " GROUP BY scope_id ORDER BY scope_id"
        ).format(table(schema))
    ).fetchall()
    assert shards == [(str(s), 1, t0 + 499 * HOUR) for s in range(5)], "each scope keeps its newest"
    left = {r["id"] for r in rows(db, schema) if r["scope_kind"] == "special"}
    assert left == {ids[k] for k in ("pending", "running", "failed_retry", "recent", "newest")}
    assert count(db, schema, "runner_id = 'registrar'") == 3, "recent runs are kept"

    again = ops.ok("prune", "--older-than", "30d")
    assert re.search(r"\b0\b", again), again


@pytest.mark.parametrize("duration", ["soon", "0s", "-5d", "30 parsecs"])
def test_prune_bad_duration_is_one_line(ops: Ops, duration: str) -> None:
    before = count(ops.db, ops.schema)
    assert_one_line_error(ops("prune", f"--older-than={duration}"), "older_than")
    assert count(ops.db, ops.schema) == before
