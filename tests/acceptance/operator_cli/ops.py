"""What the operator-command tests (``tests/acceptance/operator_cli``) share: ``python -m
pgsched`` run against the test's database and schema (:class:`Ops`), the jobs a replica would
have registered, and reading the commands' tables and one-line errors."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from tests.support.rows import rows, table

HOUR = timedelta(hours=1)
ENV_KEYS = ("PGSCHED_DSN", "PGSCHED_SCHEMA", "DATABASE_URL", "PGSCHED_LOG_FORMAT")
RUN_FIELDS = ("job", "scope", "plan_time", "attempt", "execution_id", "runner_id")
TENANTS = [pgsched.Scope("tenant", "a"), pgsched.Scope("tenant", "b")]

# The APP of `pgsched backfill`; the same two jobs the `ops` fixture registers.
APP = textwrap.dedent(
    """
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="30s")

    @scheduler.job(every="1h")
    def hourly(run):
        return 1

    @scheduler.job(
        every="1h", scopes=[pgsched.Scope("tenant", "a"), pgsched.Scope("tenant", "b")]
    )
    def per_tenant(run):
        return 1
    """
)


def _ok(run: pgsched.Run) -> int:
    return 1


def fmt(value: datetime) -> str:
    """A time as the human tables print it."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def parse_table(text: str) -> list[dict[str, str]]:
    """The rows of an aligned table (columns are separated by at least two spaces)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = re.split(r"\s{2,}", lines[0].strip())
    return [dict(zip(header, re.split(r"\s{2,}", line.strip()), strict=True)) for line in lines[1:]]


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> str:
    """Exit 1, one ``pgsched: error: ...`` line on stderr, nothing on stdout, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgsched: error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


class Ops:
    """Runs ``python -m pgsched ...`` against the test's database and schema."""

    def __init__(self, dsn: str, schema: str, workdir: Path, db: Any) -> None:
        self.dsn, self.schema, self.workdir, self.db = dsn, schema, workdir, db

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
        env.update(PGSCHED_DSN=self.dsn, PGSCHED_SCHEMA=self.schema)
        env.update(extra)
        return env

    def __call__(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgsched", *args],
            cwd=self.workdir,
            env=self.env() if env is None else env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def ok(self, *args: str) -> str:
        result = self(*args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        assert "Traceback" not in result.stderr
        return result.stdout

    def job_row(self, job: str) -> dict[str, Any]:
        with self.db.cursor(row_factory=dict_row) as cur:
            cur.execute(
                sql.SQL("SELECT * FROM {} WHERE job_name = %s").format(
                    table(self.schema, "job_state")
                ),
                (job,),
            )
            found = cur.fetchone()
        assert found is not None, f"job {job!r} is not in job_state"
        return dict(found)


def register_jobs(dsn: str, schema: str) -> None:
    """Register hourly and per_tenant in job_state the way a replica does: one tick."""
    s = pgsched.Scheduler(dsn=dsn, schema=schema, runner_id="registrar")
    s.register(_ok, name="hourly", every="1h")
    s.register(_ok, name="per_tenant", every="1h", scopes=TENANTS)
    s.migrate()
    report = s.run_once()
    assert report.succeeded == 3, report  # hourly's plan and per_tenant's two scopes


def current_plan(ops: Ops) -> dict[str, Any]:
    """hourly's current plan, run by the registrar."""
    found = [r for r in rows(ops.db, ops.schema, "hourly") if r["runner_id"] == "registrar"]
    assert len(found) == 1 and found[0]["trigger"] == "schedule", found
    return found[0]


def trigger(ops: Ops, *args: str) -> uuid.UUID:
    """``pgsched trigger ARGS``; its stdout is exactly one line, the execution id."""
    out = ops.ok("trigger", *args)
    assert out.endswith("\n") and out.count("\n") == 1, out
    return uuid.UUID(out.strip())
