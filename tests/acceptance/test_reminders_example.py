"""examples/reminders.py (docs/schedules.md) as a real replica: ``python -m pgsched run
examples/reminders.py`` on a fresh schema runs a schedule put through ``pgsched.Admin`` with
its payload, and exits 0 on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

import pgsched
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

REPO = Path(__file__).resolve().parents[2]


def test_reminders_example_runs_a_put_schedule_with_its_payload(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    admin = pgsched.Admin(pg_dsn, schema)
    assert admin.migrate()  # a fresh schema: every migration is applied now
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(PGSCHED_DSN=pg_dsn, PGSCHED_SCHEMA=schema, PGSCHED_LOG_FORMAT="json")
    log_path = tmp_path / "replica.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgsched", "run", "examples/reminders.py", "--http-port", "0"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
    try:
        scope = pgsched.Scope("user", "acceptance")
        payload = {"text": f"reminder {uuid.uuid4().hex}"}

        def put() -> pgsched.Schedule | None:
            assert proc.poll() is None, log_path.read_text()
            try:
                return admin.put_schedule("reminder", scope, every="1s", payload=payload)
            except pgsched.NotFoundError:  # the replica has not registered its jobs yet
                return None

        put_result = wait_until(put, 30, "the replica to register `reminder`")
        assert put_result is not None and put_result.payload == payload
        assert put_result.next_plan_time is not None  # its first plan, strictly after the put

        query = sql.SQL(
            "SELECT count(*) FROM {}.cron_executions WHERE job_name = 'reminder'"
            " AND scope_kind = %s AND scope_id = %s AND status = 'SUCCESS' AND payload = %s"
        ).format(sql.Identifier(schema))

        def succeeded() -> int:
            assert proc.poll() is None, log_path.read_text()
            with psycopg.connect(pg_dsn, autocommit=True) as conn:
                row: Any = conn.execute(query, (scope.kind, scope.id, Jsonb(payload))).fetchone()
            return int(row[0])

        wait_until(succeeded, 30, "a run of the schedule with its payload")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log_path.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    output = log_path.read_text()
    assert f"reminder for user acceptance: {payload['text']}" in output, output[-3000:]
    assert "scheduler_stopped" in output, output[-3000:]
