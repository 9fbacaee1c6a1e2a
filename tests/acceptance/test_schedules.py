"""Schedules as data end to end (docs/schedules.md): two real ``pgsched run`` replicas of an
APP with a dynamic job, driven by ``pgsched schedules ...`` subprocesses and by the HTTP API;
the handler writes every run into a ledger table."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.net import http
from tests.support.replica import Replica, clean_env
from tests.support.rows import in_schema
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

TOKEN = f"tok-{uuid.uuid4().hex}"
APP = textwrap.dedent(
    """
    import json, os
    import psycopg
    from psycopg import sql
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(name="reminder", dynamic=True, run_timeout="10s")
    def reminder(run: pgsched.Run) -> None:
        with psycopg.connect(os.environ["PGSCHED_DSN"], autocommit=True) as conn:
            conn.execute(
                sql.SQL("INSERT INTO {}.ledger VALUES (%s, %s, %s, %s)").format(
                    sql.Identifier(os.environ["PGSCHED_SCHEMA"])),
                (run.scope.id, run.plan_time, json.dumps(run.payload), run.runner_id))
    """
)


class Cli:
    """``pgsched ARGS`` subprocesses against the test's schema."""

    def __init__(self, dsn: str, schema: str, cwd: Path) -> None:
        self.dsn, self.schema, self.cwd = dsn, schema, cwd

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgsched", *args, "--dsn", self.dsn, "--schema", self.schema],
            cwd=self.cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def cluster(
    pg_dsn: str, schema: str, tmp_path: Path
) -> Iterator[tuple[Cli, list[Replica], psycopg.Connection[Any]]]:
    (tmp_path / "app.py").write_text(APP)
    cli = Cli(pg_dsn, schema, tmp_path)
    assert cli("migrate").returncode == 0
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute(
        sql.SQL(
            "CREATE TABLE {}.ledger (scope_id text, plan_time timestamptz, payload text,"
            " runner_id text, at timestamptz DEFAULT clock_timestamp())"
        ).format(sql.Identifier(schema))
    )
    env = clean_env(
        {
            "PGSCHED_DSN": pg_dsn,
            "PGSCHED_SCHEMA": schema,
            "PGSCHED_HTTP_TOKEN": TOKEN,
            "PGSCHED_LOG_FORMAT": "json",
        }
    )
    replicas = [Replica.run("app.py", name, cwd=tmp_path, env=env) for name in ("dyn-a", "dyn-b")]
    try:
        for r in replicas:
            r.http_port()
        yield cli, replicas, conn
    finally:
        codes = [r.stop() for r in replicas]
        conn.close()
    assert codes == [0, 0]


def ledger(conn: psycopg.Connection[Any], schema: str, scope_id: str) -> list[tuple[Any, ...]]:
    return in_schema(
        conn,
        schema,
        "SELECT plan_time, payload, runner_id, at FROM {s}.ledger WHERE scope_id = %s"
        " ORDER BY plan_time",
        (scope_id,),
    )


def db_now(conn: psycopg.Connection[Any]) -> Any:
    return conn.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]


def test_cli_puts_pauses_resumes_and_deletes_schedules_run_by_replicas(
    cluster: tuple[Cli, list[Replica], psycopg.Connection[Any]], schema: str
) -> None:
    cli, _, conn = cluster
    done = cli("schedules", "put", "reminder", "user:1", "--every", "1s", "--payload", '{"t":1}')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("put reminder user:1: every 1s, next plan ")
    runs = wait_until(
        lambda: len(ledger(conn, schema, "1")) >= 3 and ledger(conn, schema, "1"),
        20,
        "three runs of user:1",
    )
    assert all(json.loads(r[1]) == {"t": 1} for r in runs)
    assert len({r[0] for r in runs}) == len(runs)  # each plan once

    got = cli("schedules", "get", "reminder", "user:1", "--json")
    assert got.returncode == 0 and json.loads(got.stdout)["every"] == 1.0

    bad = cli("schedules", "put", "reminder", "user:2", "--cron", "61 * * * *")
    assert bad.returncode == 1 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.startswith("pgsched: error: job 'reminder', scope user:2: cron='61 * * * *'")
    missing = cli("schedules", "get", "reminder", "user:2")
    assert missing.returncode == 1 and "no such schedule" in missing.stderr

    assert cli("schedules", "pause", "reminder", "user:1").returncode == 0
    paused_at = db_now(conn)
    time.sleep(2.5)
    assert [r for r in ledger(conn, schema, "1") if r[3] > paused_at] == []
    assert cli("schedules", "resume", "reminder", "user:1").returncode == 0
    resumed_at = db_now(conn)
    wait_until(
        lambda: [r for r in ledger(conn, schema, "1") if r[3] > resumed_at],
        10,
        "a run of user:1 after resume",
    )

    listed = cli("schedules", "list", "reminder")
    assert listed.returncode == 0 and "user:1" in listed.stdout and "every 1s" in listed.stdout
    assert cli("schedules", "delete", "reminder", "user:1").returncode == 0
    deleted_at = db_now(conn)
    time.sleep(2.5)
    assert [r for r in ledger(conn, schema, "1") if r[3] > deleted_at] == []
    again = cli("schedules", "delete", "reminder", "user:1")
    assert again.returncode == 1 and "no such schedule" in again.stderr
    unknown = cli("schedules", "list", "nope")
    assert unknown.returncode == 1 and "unknown job 'nope'" in unknown.stderr


def test_http_api_of_schedules(
    cluster: tuple[Cli, list[Replica], psycopg.Connection[Any]], schema: str
) -> None:
    _, replicas, conn = cluster
    a, b = replicas
    path = "/api/jobs/reminder/schedules/user:9"
    body = {"every": "1s", "payload": {"name": "nine"}}
    assert http("PUT", a.url(path), body=body).status == 401
    assert http("PUT", a.url(path), body=body, token="wrong").status == 401
    put = http("PUT", a.url(path), body=body, token=TOKEN)
    assert put.status == 200, put.text
    assert put.json()["every"] == 1.0 and put.json()["payload"] == {"name": "nine"}
    runs = wait_until(lambda: ledger(conn, schema, "9"), 20, "a run of user:9")
    assert json.loads(runs[0][1]) == {"name": "nine"}

    bad = http(
        "PUT", a.url("/api/jobs/reminder/schedules/user:10"), body={"cron": "x"}, token=TOKEN
    )
    assert bad.status == 400
    assert bad.json()["error"].startswith("job 'reminder', scope user:10: cron='x'")
    unknown_field = http("PUT", a.url(path), body={"every": "1s", "evry": 1}, token=TOKEN)
    assert unknown_field.status == 400 and "evry" in unknown_field.json()["error"]
    assert "(did you mean 'every'?)" in unknown_field.json()["error"]
    assert b.get("/api/jobs/reminder/schedules/user:10").status == 404

    listed = b.get("/api/jobs/reminder/schedules?limit=10").json()["schedules"]
    assert [s["scope"] for s in listed] == [{"kind": "user", "id": "9"}]
    assert b.post(path + "/pause", token=TOKEN).status == 200
    assert b.get(path).json()["paused"] is True
    jobs = {j["job"]: j for j in b.get("/api/jobs").json()["jobs"]}
    assert jobs["reminder"]["schedules"] == 1 and jobs["reminder"]["schedules_paused"] == 1
    assert "1 schedules, 1 paused" in b.get("/").text
    assert b.post(path + "/resume", token=TOKEN).status == 200
    assert http("DELETE", b.url(path), token=TOKEN).status == 200
    assert http("DELETE", b.url(path), token=TOKEN).status == 404
    # The replica's API knows the jobs its APP registered (a Scheduler's rule, docs/schedules.md).
    ghost = b.get("/api/jobs/ghost/schedules")
    assert ghost.status == 400 and "not registered as dynamic" in ghost.json()["error"]
