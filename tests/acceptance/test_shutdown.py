"""SIGTERM: stop claiming, let running handlers finish within the grace, fail the rest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.replica import Replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP = textwrap.dedent(
    """
    import os, time
    import pgsched

    scheduler = pgsched.Scheduler(
        tick_interval="0.5s", shutdown_grace=os.environ["GRACE"]
    )

    @scheduler.job(every="1h", run_timeout="30s", max_attempts=2, heartbeat_interval="1s")
    def slow(run):
        time.sleep(float(os.environ["SLEEP"]))
        return 7
    """
)


def _row(conn: psycopg.Connection, schema: str) -> tuple[Any, ...] | None:
    return conn.execute(
        sql.SQL(
            "SELECT status, error_code, next_retry_at IS NOT NULL, rows_affected"
            " FROM {}.cron_executions WHERE job_name = 'slow'"
        ).format(sql.Identifier(schema))
    ).fetchone()


@pytest.mark.parametrize(
    ("grace", "sleep", "expected"),
    [
        # finishes within the grace (2 s of 10 s: a generous bound, not a performance claim)
        ("10s", "2", ("SUCCESS", None, False, 7)),
        ("0.5s", "30", ("FAILED", "shutdown", True, None)),  # abandoned, retryable
    ],
)
def test_sigterm_mid_run(
    pg_dsn: str,
    schema: str,
    tmp_path: Path,
    db: psycopg.Connection,
    grace: str,
    sleep: str,
    expected: tuple[Any, ...],
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "PGSCHED_DSN": pg_dsn, "GRACE": grace, "SLEEP": sleep}
    migrate = [sys.executable, "-m", "pgsched", "--schema", schema, "migrate"]
    subprocess.run(migrate, env=env, check=True, capture_output=True)
    replica = Replica(
        ["--schema", schema, "run", "app.py", "--migrate", "--http-port", "0"],
        cwd=tmp_path,
        env=env,
    )
    try:
        wait_until(
            lambda: (_row(db, schema) or ("",))[0] == "RUNNING", 30, "the slow job to be running"
        )
        replica.signal(signal.SIGTERM)
        sent = time.monotonic()
        assert replica.proc.wait(30) == 0, replica.output()[-2000:]
        elapsed = time.monotonic() - sent
    finally:
        replica.kill()
    assert _row(db, schema) == expected
    if expected[0] == "FAILED":
        # guard against an order-of-magnitude regression (typically the 0.5 s grace plus the
        # process's exit), not a performance claim: those live in bench/
        assert elapsed < 10, f"abandoning after a 0.5 s grace took {elapsed:.1f}s"
