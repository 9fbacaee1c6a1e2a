"""Least privilege (sql/roles.sql): the owner migrates, replicas and commands run as the
runtime role, which has the DML pgsched needs and no DDL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.replica import Replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

ROLES_SQL = Path(__file__).resolve().parents[2] / "sql" / "roles.sql"
APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1s", scopes=[pgsched.Scope("shard", str(i)) for i in range(3)])
    def tick(run):
        return 1

    @scheduler.job(every="1h", max_attempts=2, retry_backoff=[])
    def flaky(run):
        if run.attempt == 1:
            raise RuntimeError("first attempt fails")
    """
)


class Roles:
    def __init__(self, admin_dsn: str, schema: str) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.schema, self.owner, self.runtime = schema, f"own_{suffix}", f"run_{suffix}"
        self.admin_dsn = admin_dsn
        self.owner_dsn = make_conninfo(admin_dsn, user=self.owner, password="owner-pw")
        self.runtime_dsn = make_conninfo(admin_dsn, user=self.runtime, password="runtime-pw")

    def cli(self, dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
        return subprocess.run(
            [sys.executable, "-m", "pgsched", "--dsn", dsn, "--schema", self.schema, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def roles(pg_dsn: str, schema: str) -> Iterator[Roles]:
    psql = shutil.which("psql")
    if psql is None:
        pytest.skip("psql is needed to run sql/roles.sql")
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        if not row or not row[0]:
            pytest.skip("the test database user cannot create roles")
    r = Roles(pg_dsn, schema)
    variables = {
        "schema": schema,
        "owner": r.owner,
        "runtime": r.runtime,
        "owner_password": "owner-pw",
        "runtime_password": "runtime-pw",
    }
    args = [a for k, v in variables.items() for a in ("-v", f"{k}={v}")]
    subprocess.run(
        [psql, "-X", "-q", pg_dsn, *args, "-f", str(ROLES_SQL)],
        check=True,
        capture_output=True,
        text=True,
    )
    yield r
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        for role in (r.runtime, r.owner):
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_runtime_role_runs_pgsched_without_ddl(roles: Roles, tmp_path: Path) -> None:
    # The owner migrates (a ready-made schema it owns; no CREATE on the database needed).
    migrated = roles.cli(roles.owner_dsn, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    # The runtime role cannot: no DDL. One line, no password.
    refused = roles.cli(roles.runtime_dsn, "migrate")
    assert refused.returncode == 1 and "permission denied" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert "runtime-pw" not in refused.stderr + refused.stdout

    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "PGSCHED_DSN": roles.runtime_dsn}
    replica = Replica(
        ["--schema", roles.schema, "run", "app.py", "--http-port", "0"], cwd=tmp_path, env=env
    )
    try:
        with psycopg.connect(roles.admin_dsn, autocommit=True) as conn:

            def done() -> bool:
                counts: dict[str, int] = dict(
                    conn.execute(
                        sql.SQL(
                            "SELECT job_name, count(*) FROM {}.cron_executions"
                            " WHERE status = 'SUCCESS' GROUP BY 1"
                        ).format(sql.Identifier(roles.schema))
                    ).fetchall()
                )
                # tick ran (insert, heartbeat, finish), flaky was retried (update).
                return counts.get("tick", 0) >= 6 and counts.get("flaky", 0) == 1

            wait_until(done, 30, "runs as the runtime role")
        # Operator commands work as the runtime role too.
        for args in (
            ["status", "--json"],
            ["runs", "--limit", "5"],
            ["pause", "tick"],
            ["resume", "tick"],
            ["trigger", "flaky"],
            ["prune", "--older-than", "1d"],
        ):
            result = roles.cli(roles.runtime_dsn, *args)
            assert result.returncode == 0, (args, result.stderr)
    finally:
        code = replica.stop(30)
    output = replica.output()
    assert code == 0, output[-2000:]
    assert "tick_error" not in output and "permission denied" not in output
    assert "runtime-pw" not in output

    # And the runtime role really holds no DDL or superuser power.
    with psycopg.connect(roles.runtime_dsn, autocommit=True) as conn:
        params = conninfo_to_dict(roles.runtime_dsn)
        assert params["user"] == roles.runtime
        for statement in (
            "CREATE TABLE {}.intruder (a int)",
            "DROP TABLE {}.cron_executions",
            "ALTER TABLE {}.job_state ADD COLUMN x int",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(sql.SQL(statement).format(sql.Identifier(roles.schema)))
        superuser = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
        assert superuser.fetchone() == (False,)
