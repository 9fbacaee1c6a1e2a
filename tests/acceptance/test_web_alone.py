"""``pgsched web`` answers ``/healthz``, ``/readyz`` and ``/metrics`` as a replica does, takes
``--http-port`` and ``--http-host`` as ``pgsched run`` does, and still takes the deprecated
``--port``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.net import http
from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def _web_url(web: Replica) -> str:
    for line in web.output().splitlines():
        if "the dashboard is on " in line:
            return line.split("the dashboard is on ", 1)[1].strip()
    assert web.alive, web.output()
    return ""


def test_pgsched_web_serves_the_probes_and_the_database_gauges(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})
    subprocess.run(
        [sys.executable, "-m", "pgsched", "migrate"], env=env, check=True, capture_output=True
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        s = sql.Identifier(schema)
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.job_state (job_name, schedule) VALUES ('nightly', 'every 1d')"
            ).format(s)
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.cron_executions (job_name, scope_kind, scope_id, plan_time,"
                " trigger, status, attempt, max_attempts, finished_at, error_code)"
                " VALUES ('nightly', 'global', 'global', now() - interval '1 hour', 'schedule',"
                " 'FAILED', 1, 1, now(), 'handler_error')"
            ).format(s)
        )
    web = Replica(
        ["web", "--http-host", "127.0.0.1", "--http-port", "0"], cwd=tmp_path, env=env, name="web"
    )
    try:
        base = wait_until(lambda: _web_url(web), 30, "pgsched web's address")
        health = http("GET", base + "healthz")
        assert health.status == 200 and health.json()["alive"] is True, health.text
        ready = http("GET", base + "readyz")
        assert ready.status == 200 and ready.json() == {"ready": True}, ready.text
        metrics = http("GET", base + "metrics")
        assert metrics.status == 200
        assert 'pgsched_failed_runs{job="nightly"} 1.0' in metrics.text, metrics.text
        assert 'pgsched_running_stale{job="nightly"} 0.0' in metrics.text
        assert http("GET", base).status == 200  # the dashboard still at /
        # The schema loses a migration: not ready, still alive.
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DELETE FROM {}.schema_migrations WHERE version = '0020'").format(
                    sql.Identifier(schema)
                )
            )
        unready = http("GET", base + "readyz")
        assert unready.status == 503 and "not migrated" in unready.json()["reason"]
        assert http("GET", base + "healthz").status == 200
    finally:
        web.stop(30)


def test_the_old_port_option_still_works_and_says_it_is_deprecated(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})
    subprocess.run(
        [sys.executable, "-m", "pgsched", "migrate"], env=env, check=True, capture_output=True
    )
    web = Replica(["web", "--port", "0"], cwd=tmp_path, env=env, name="web-old")
    try:
        base = wait_until(lambda: _web_url(web), 30, "pgsched web's address")
        assert http("GET", base + "healthz").status == 200
        assert "--port is deprecated, use --http-port" in web.output()
    finally:
        web.stop(30)
