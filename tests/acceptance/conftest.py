"""Real ``pgsched`` subprocesses against the tests' PostgreSQL."""

from __future__ import annotations

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

from tests.support.replica import Replica, clean_env
from tests.support.rows import in_schema
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

    # Killed mid-run and taken over: not transactional, so stealing is said explicitly.
    @scheduler.job(
        every="1h", run_timeout="3s", stale_timeout="4s", heartbeat_interval="1s",
        max_attempts=2, allow_stale_reentry=True,
    )
    def victim(run):
        record(run)
        if run.attempt == 1:
            time.sleep(2.5)  # long enough to be killed mid-run
        return 1
    """
)


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


class Replicas:
    """``pgsched run`` replicas of one app, on one database and schema: started by runner id,
    stopped together."""

    def __init__(
        self, dsn: str, schema: str, workdir: Path, extra_env: dict[str, str] | None = None
    ) -> None:
        self.dsn, self.schema, self.workdir = dsn, schema, workdir
        self.extra_env = extra_env or {}
        self.members: dict[str, Replica] = {}

    def env(self) -> dict[str, str]:
        return clean_env({"PGSCHED_DSN": self.dsn, "PGSCHED_SCHEMA": self.schema, **self.extra_env})

    def start(self, runner_id: str, app: str = "app.py") -> Replica:
        replica = Replica.run(app, runner_id, cwd=self.workdir, env=self.env())
        self.members[runner_id] = replica
        return replica

    def terminate_all(self, timeout: float = 20) -> dict[str, int | None]:
        """SIGTERM every replica at once, once each live one handles it; their exit codes
        (None: killed after ``timeout``)."""
        # One restarted last may still be starting on a loaded machine: before it reaches
        # pgsched's signal handling a SIGTERM kills it (-15), as it does any process.
        for replica in self.members.values():
            if replica.alive:
                replica.wait_sigterm_handled()
        for replica in self.members.values():
            replica.signal(signal.SIGTERM)
        return {rid: replica.stop(timeout) for rid, replica in self.members.items()}

    def kill_all(self) -> None:
        """SIGKILL every replica still running (a test's teardown)."""
        for replica in self.members.values():
            replica.kill()

    def output(self, runner_id: str) -> str:
        return self.members[runner_id].output()


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
