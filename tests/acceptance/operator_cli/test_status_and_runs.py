"""``pgsched status`` and ``pgsched runs`` as an operator meets them (real ``python -m pgsched``
subprocesses), ``--dsn`` and ``--schema`` before or after the command, and one-line errors
without tracebacks or passwords, an unreachable database's included."""

from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any

import pytest

import pgsched
from tests.acceptance.operator_cli.ops import (
    ENV_KEYS,
    HOUR,
    Ops,
    assert_one_line_error,
    current_plan,
    fmt,
    parse_table,
)
from tests.support.rows import count, db_now, insert_row, rows

pytestmark = pytest.mark.acceptance


# -- status -------------------------------------------------------------------------------


def test_status_lists_every_job_with_counts(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    first = current_plan(ops)
    p0, now = first["plan_time"], db_now(db)
    seeds: list[dict[str, Any]] = [
        dict(status="RUNNING", stale_after=now + HOUR, heartbeat_at=now, started_at=now),
        dict(status="RUNNING", stale_after=now + HOUR, heartbeat_at=now, started_at=now),
        dict(status="RUNNING", stale_after=now - HOUR, heartbeat_at=now - HOUR, started_at=now),
        dict(status="FAILED", finished_at=now - HOUR, error_code="handler_error"),
        dict(status="FAILED", finished_at=now - HOUR, error_code="handler_error"),
        dict(status="FAILED", finished_at=now - HOUR, error_code="run_timeout"),
        # a FAILED row with a retry left is not counted as failed
        dict(
            status="FAILED",
            finished_at=now - HOUR,
            error_code="handler_error",
            attempt=1,
            max_attempts=3,
            next_retry_at=now + HOUR,
        ),
        dict(status="PENDING", trigger="backfill"),
        dict(status="PENDING", trigger="backfill"),
    ]
    for n, cols in enumerate(seeds, start=1):
        cols.setdefault("runner_id", "seed")
        insert_row(db, schema, job_name="hourly", plan_time=p0 - n * HOUR, **cols)
    ops.ok("pause", "per_tenant")

    table_rows = {r["JOB"]: r for r in parse_table(ops.ok("status"))}
    assert set(table_rows) == {"hourly", "per_tenant"}
    hourly = table_rows["hourly"]
    next_plan = hourly.pop("NEXT PLAN")
    if db_now(db) < p0 + HOUR:  # else the hour turned since the replica registered its plans
        assert next_plan == fmt(p0 + HOUR)
    assert hourly == {
        "JOB": "hourly",
        "SCHEDULE": "every 1h",
        "PAUSED": "no",
        "LAST PLAN": fmt(p0),
        "LAST STATUS": "SUCCESS",
        "LAST SUCCESS": fmt(first["finished_at"]),
        "RUNNING": "2",
        "STALE": "1",
        "FAILED": "3",
        "PENDING": "2",
    }
    tenant = table_rows["per_tenant"]
    assert (tenant["PAUSED"], tenant["LAST PLAN"], tenant["LAST STATUS"]) == (
        "yes",
        fmt(p0),
        "SUCCESS",
    )
    assert [tenant[k] for k in ("RUNNING", "STALE", "FAILED", "PENDING")] == ["0"] * 4

    doc = json.loads(ops.ok("status", "--json"))
    by_name = {j["job"]: j for j in doc["jobs"]}
    assert set(by_name) == {"hourly", "per_tenant"}
    h = by_name["hourly"]
    assert (h["running"], h["stale"], h["failed"], h["pending"]) == (2, 1, 3, 2)
    assert h["paused"] is False and by_name["per_tenant"]["paused"] is True
    assert h["last_status"] == "SUCCESS"
    assert datetime.fromisoformat(h["last_plan"]) == p0
    assert datetime.fromisoformat(h["last_success"]) == first["finished_at"]
    assert h["schedule"] == "every 1h"

    # --dsn and --schema instead of the environment give the same answer
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    flags = ops("--dsn", ops.dsn, "--schema", schema, "status", "--json", env=base)
    assert flags.returncode == 0, flags.stderr
    assert json.loads(flags.stdout)["jobs"] == doc["jobs"]


# -- runs ---------------------------------------------------------------------------------


def _seed_runs(ops: Ops) -> None:
    now, p0 = db_now(ops.db), current_plan(ops)["plan_time"]
    for n, status in enumerate(["SUCCESS", "FAILED", "SUCCESS", "FAILED", "SUCCESS"], start=1):
        insert_row(
            ops.db,
            ops.schema,
            job_name="hourly",
            plan_time=p0 - n * HOUR,
            status=status,
            created_at=now - n * HOUR,
            finished_at=now - n * HOUR,
            error_code="handler_error" if status == "FAILED" else None,
            error_msg="ValueError: boom" if status == "FAILED" else None,
        )
    insert_row(
        ops.db,
        ops.schema,
        job_name="per_tenant",
        scope_kind="tenant",
        scope_id="a",
        plan_time=p0 - 30 * HOUR,
        trigger="manual",
        status="CANCELLED",
        created_at=now - 30 * HOUR,
        finished_at=now - 30 * HOUR,
    )


def _runs_json(ops: Ops, *args: str) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = json.loads(ops.ok("runs", "--json", *args))["runs"]
    plans = [datetime.fromisoformat(r["plan_time"]) for r in runs]
    assert plans == sorted(plans, reverse=True), "runs are listed newest plan first"
    return runs


def test_runs_newest_first_with_filters(ops: Ops) -> None:
    _seed_runs(ops)
    total = count(ops.db, ops.schema)
    assert total == 9

    everything = _runs_json(ops, "--limit", "100")
    assert len(everything) == total
    assert {r["id"] for r in everything} == {str(r["id"]) for r in rows(ops.db, ops.schema)}

    default = _runs_json(ops)
    assert len(default) == total  # fewer than the default limit of 20

    hourly = _runs_json(ops, "--job", "hourly")
    assert {r["job"] for r in hourly} == {"hourly"} and len(hourly) == 6

    failed = _runs_json(ops, "--status", "failed")  # case-insensitive
    assert [r["status"] for r in failed] == ["FAILED", "FAILED"]
    assert {r["error_code"] for r in failed} == {"handler_error"}

    newest_two = _runs_json(ops, "--job", "hourly", "--status", "SUCCESS", "--limit", "2")
    assert len(newest_two) == 2
    by_plan = sorted(
        (r for r in rows(ops.db, ops.schema, "hourly") if r["status"] == "SUCCESS"),
        key=lambda r: r["plan_time"],
        reverse=True,
    )
    assert [r["id"] for r in newest_two] == [str(r["id"]) for r in by_plan[:2]]

    # a job no record names is a typo, one line; a known job's empty page is still a page
    for args in (("--job", "no_such_job"), ("--job", "no_such_job", "--json")):
        line = assert_one_line_error(ops("runs", *args))
        assert line == "pgsched: error: no job named 'no_such_job'", line
    assert _runs_json(ops, "--job", "hourly", "--since", "2040-01-01T00:00:00") == []
    cancelled = _runs_json(ops, "--status", "CANCELLED")
    assert [(r["job"], r["scope"]) for r in cancelled] == [
        ("per_tenant", {"kind": "tenant", "id": "a"})
    ]

    # the human table: a header and the newest rows, in the same order as --json
    lines = ops.ok("runs", "--limit", "3").strip().splitlines()
    assert lines[0].split()[:3] == ["ID", "JOB", "SCOPE"]
    assert [line.split()[0] for line in lines[1:]] == [r["id"] for r in everything[:3]]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--status", "DONE"), ("'DONE'", "PENDING")),
        (("--limit", "0"), ("limit",)),
    ],
)
def test_runs_bad_arguments_give_one_line(
    ops: Ops, args: tuple[str, ...], needles: tuple[str, ...]
) -> None:
    assert_one_line_error(ops("runs", *args), *needles)


def test_usage_errors_are_one_line(bare_ops: Ops) -> None:
    ops = bare_ops
    for args in (("runs", "--limit", "many"), ("trigger",), ("prune",)):
        result = ops(*args)
        assert result.returncode != 0
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert lines[0].startswith("pgsched: error: ")


# -- --dsn and --schema before or after the command (the README: both work) ---------------------


def test_connection_options_work_before_or_after_the_command(ops: Ops) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    conn = ("--dsn", ops.dsn, "--schema", ops.schema)
    for command in (("status", "--json"), ("runs", "--json", "--job", "hourly")):
        outputs = []
        for args in ((*conn, *command), (*command, *conn), (conn[0], conn[1], *command, *conn[2:])):
            result = ops(*args, env=base)
            assert result.returncode == 0, (args, result.stderr)
            outputs.append(json.loads(result.stdout))
        assert outputs[0] == outputs[1] == outputs[2] and outputs[0], command
    assert ops("pause", "hourly", *conn, env=base).returncode == 0
    assert ops.job_row("hourly")["paused"] is True
    assert ops("resume", *conn, "hourly", env=base).returncode == 0
    assert ops.job_row("hourly")["paused"] is False
    # The schema given after the command wins over the one before it, as for any option.
    other = ops("--schema", "nosuch", "status", "--schema", ops.schema, "--dsn", ops.dsn, env=base)
    assert other.returncode == 0, other.stderr


# -- unreachable database -----------------------------------------------------------------


def test_unreachable_database_is_one_line_without_password(bare_ops: Ops) -> None:
    ops = bare_ops
    secret = "s3cretpw"
    dsn = f"postgresql://u:{secret}@127.0.0.1:1/x"
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    commands = [
        ("status",),
        ("status", "--json"),
        ("runs",),
        ("trigger", "hourly"),
        ("pause", "hourly"),
    ]
    for command in commands:
        for args, env in (
            (("--dsn", dsn, *command), base),
            (command, {**base, "PGSCHED_DSN": dsn}),
        ):
            result = ops(*args, env=env)
            assert_one_line_error(result, "database error")
            assert secret not in result.stdout + result.stderr, (args, result.stderr)


@pytest.mark.parametrize(
    "dsn",
    ["postgresql://u:s3cret%zzpw@127.0.0.1:1/x", "postgresql://u:s3cret pw@127.0.0.1:1/x"],
)
def test_malformed_dsn_error_hides_password(bare_ops: Ops, dsn: str) -> None:
    base = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    result = bare_ops("--dsn", dsn, "status", env=base)
    assert_one_line_error(result)
    assert "s3cret" not in result.stdout + result.stderr, result.stderr


def test_runs_output_hides_passwords_from_handler_errors(ops: Ops) -> None:
    s = pgsched.Scheduler(dsn=ops.dsn, schema=ops.schema, runner_id="leaky-runner")

    def leaky(run: pgsched.Run) -> None:
        raise RuntimeError("connect to postgresql://app:hunter2@db/x failed (password=hunter2)")

    s.register(leaky, name="leaky", every="1h")
    assert s.run_once().failed == 1
    for args in (("runs",), ("runs", "--json"), ("runs", "--job", "leaky", "--json")):
        out = ops.ok(*args)
        assert "leaky" in out
        assert "hunter2" not in out, out
