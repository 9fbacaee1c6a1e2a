"""Real ``pgsched`` subprocesses against the tests' PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.waiting import wait_until

# The config module the replicas run. Each handler records its execution in a ledger table
# (the side effect whose duplicates the tests count) before doing its work.
APP = textwrap.dedent(
    """
    import os, time
    import psycopg
    from psycopg import sql
    import pgsched

    SCHEMA = os.environ["PGSCHED_SCHEMA"]
    scheduler = pgsched.Scheduler(tick_interval="0.5s", max_concurrency=8)

    def record(run):
        with psycopg.connect(os.environ["PGSCHED_DSN"], autocommit=True) as conn:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {}.ledger (job, scope_id, plan_time, attempt, runner_id)"
                    " VALUES (%s, %s, %s, %s, %s)"
                ).format(sql.Identifier(SCHEMA)),
                (run.job, run.scope.id, run.plan_time, run.attempt, run.runner_id),
            )

    @scheduler.job(every="1s", scopes=[pgsched.Scope("shard", str(i)) for i in range(4)])
    def fast(run):
        record(run)
        return 1

    @scheduler.job(
        every="1h", run_timeout="3s", stale_timeout="4s", heartbeat_interval="1s",
        max_attempts=2,
    )
    def victim(run):
        record(run)
        if run.attempt == 1:
            time.sleep(2.5)  # long enough to be killed mid-run
        return 1
    """
)


def in_schema(
    conn: psycopg.Connection[Any], schema: str, text: str, params: tuple[Any, ...] = ()
) -> list[tuple[Any, ...]]:
    """Run ``text`` with ``{s}`` standing for the test's schema."""
    return conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params).fetchall()


def victim_first_attempt(conn: psycopg.Connection[Any], schema: str) -> tuple[Any, ...]:
    """Wait for APP's ``victim`` job to record its first attempt: (plan_time, runner_id)."""
    return wait_until(
        lambda: in_schema(
            conn,
            schema,
            "SELECT plan_time, runner_id FROM {s}.ledger WHERE job='victim' AND attempt=1",
        ),
        30,
        "the victim's first attempt",
        interval=0.05,
    )[0]


def spawn_pgsched(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``python -m pgsched ARGS`` with stdout and stderr merged into one text pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "pgsched", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


class Replicas:
    """Starts and stops ``pgsched run`` replicas; collects their output."""

    def __init__(
        self, dsn: str, schema: str, workdir: Path, extra_env: dict[str, str] | None = None
    ) -> None:
        self.dsn, self.schema, self.workdir = dsn, schema, workdir
        self.extra_env = extra_env or {}
        self.procs: dict[str, subprocess.Popen[str]] = {}

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
        env.update(PGSCHED_DSN=self.dsn, PGSCHED_SCHEMA=self.schema, **self.extra_env, **extra)
        return env

    def start(self, runner_id: str, app: str = "app.py") -> subprocess.Popen[str]:
        proc = spawn_pgsched(
            ["run", app, "--runner-id", runner_id, "--http-port", "0"], self.workdir, self.env()
        )
        self.procs[runner_id] = proc
        return proc

    def terminate_all(self, timeout: float = 20) -> dict[str, int]:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        return {rid: proc.wait(timeout) for rid, proc in self.procs.items()}

    def kill_all(self) -> None:
        """SIGKILL every replica still running (a test's teardown)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)

    def output(self, runner_id: str) -> str:
        proc = self.procs[runner_id]
        assert proc.stdout is not None
        return proc.stdout.read() if proc.poll() is not None else ""


@pytest.fixture
def replicas(pg_dsn: str, schema: str, tmp_path: Path) -> Iterator[Replicas]:
    (tmp_path / "app.py").write_text(APP)
    subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", pg_dsn, "--schema", schema, "migrate"],
        check=True,
        capture_output=True,
        text=True,
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.ledger (job text, scope_id text, plan_time timestamptz,"
                " attempt int, runner_id text, at timestamptz DEFAULT clock_timestamp())"
            ).format(sql.Identifier(schema))
        )
    group = Replicas(pg_dsn, schema, tmp_path)
    yield group
    group.kill_all()
